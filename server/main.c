/* weftd: parses the configuration, sets up logging and runs the server until SIGTERM. */
#include <stdio.h>
#include <unistd.h>

#include "proto/log.h"
#include "server/config.h"

int main(int argc, char **argv) {
    wf_config cfg;
    char err[512];
    int rc = wf_config_parse(&cfg, argc, argv, err, sizeof err);
    if (rc != 0) {
        if (rc < 0) fprintf(stderr, "weftd: %s\n", err);
        wf_config_free(&cfg);
        return rc < 0 ? 2 : 0;
    }
    wf_log_level level;
    if (wf_log_level_parse(cfg.log_level, &level) < 0) {
        fprintf(stderr, "weftd: unknown --log-level '%s' (trace, debug, info, warn, error)\n",
                cfg.log_level);
        wf_config_free(&cfg);
        return 2;
    }
    wf_log_set_level(level);
    if (access(cfg.model, R_OK) != 0) {
        WF_LOG_ERROR("server", NULL, "model file %s is not readable (run scripts/setup, or pass --model FILE)",
                     cfg.model);
        wf_config_free(&cfg);
        return 1;
    }
    WF_LOG_INFO("server", NULL, "model %s; the HTTP front end is not built yet", cfg.model);
    wf_config_free(&cfg);
    return 1;
}
