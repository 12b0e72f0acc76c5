/* weft-bench: a load generator for OpenAI-compatible servers (see loadgen/README in issue 6). */
#include <stdio.h>
#include <string.h>

#include "weft_version.h"

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("weft-bench %s\n", WEFT_VERSION);
            return 0;
        }
    }
    fprintf(stderr, "weft-bench %s: the load generator is not built yet\n", WEFT_VERSION);
    return 2;
}
