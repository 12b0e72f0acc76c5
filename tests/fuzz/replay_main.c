/* Replays a fuzz target's corpus without libFuzzer, so every build (and the sanitizer build)
 * runs the seeds as a plain test. Usage: fuzz_X_replay DIR_OR_FILE... */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
    size_t got = buf ? fread(buf, 1, (size_t)len, f) : 0;
    fclose(f);
    if (!buf || got != (size_t)len) {
        fprintf(stderr, "%s: read failed\n", path);
        free(buf);
        return 1;
    }
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    int files = 0, failures = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            failures += replay_file(argv[i]);
            files++;
            continue;
        }
        DIR *dir = opendir(argv[i]);
        struct dirent *ent;
        while (dir && (ent = readdir(dir))) {
            if (ent->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], ent->d_name);
            failures += replay_file(path);
            files++;
        }
        if (dir) closedir(dir);
    }
    printf("replayed %d inputs, %d unreadable\n", files, failures);
    return files == 0 || failures ? 1 : 0;
}
