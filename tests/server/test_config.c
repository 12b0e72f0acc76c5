/* server/config.c: flags, the JSON file, --api-key-file, and the options the server added. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "server/config.h"

static int parse(wf_config *cfg, char **argv, char *err, size_t errlen) {
    int argc = 0;
    while (argv[argc]) argc++;
    return wf_config_parse(cfg, argc, argv, err, errlen);
}

static char *write_tmp(const char *text) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/weft-config-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

START_TEST(defaults) {
    wf_config cfg;
    char err[256];
    char *argv[] = {"weftd", NULL};
    ck_assert_int_eq(parse(&cfg, argv, err, sizeof err), 0);
    ck_assert_int_eq(cfg.max_body_bytes, 8L << 20);
    ck_assert_int_eq(cfg.max_header_bytes, 64L << 10);
    ck_assert_int_eq(cfg.request_timeout_ms, 60000);
    ck_assert_int_eq(cfg.max_running, 64);
    ck_assert_int_eq(cfg.n_api_keys, 0);
    ck_assert_ptr_null(cfg.cost_model);
    ck_assert_int_eq(cfg.fixed_cost_model, 0);
    ck_assert(cfg.admission_factor == 2.0);
    wf_config_free(&cfg);
    /* The admission factor is settable (the serving benchmark turns admission off with it)
     * and bounded above zero. */
    char *argv2[] = {"weftd", "--admission-factor", "1000", NULL};
    ck_assert_int_eq(parse(&cfg, argv2, err, sizeof err), 0);
    ck_assert(cfg.admission_factor == 1000.0);
    wf_config_free(&cfg);
    char *argv3[] = {"weftd", "--admission-factor", "0", NULL};
    ck_assert_int_eq(parse(&cfg, argv3, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "admission-factor"));
    wf_config_free(&cfg);
    /* The stall cap: on by default, 0 turns it off, negative is refused by name. */
    ck_assert_int_eq(parse(&cfg, argv, err, sizeof err), 0);
    ck_assert(cfg.prefill_stretch == 2.0);
    wf_config_free(&cfg);
    char *argv4[] = {"weftd", "--prefill-stretch", "0", NULL};
    ck_assert_int_eq(parse(&cfg, argv4, err, sizeof err), 0);
    ck_assert(cfg.prefill_stretch == 0.0);
    wf_config_free(&cfg);
    char *argv5[] = {"weftd", "--prefill-stretch", "-1", NULL};
    ck_assert_int_eq(parse(&cfg, argv5, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "prefill-stretch"));
    wf_config_free(&cfg);
}
END_TEST

START_TEST(api_keys_from_flags_and_file) {
    char *path = write_tmp("# keys\n  sk-a  \n\nsk-b\r\n");
    wf_config cfg;
    char err[256];
    char *argv[] = {"weftd", "--api-key", "sk-flag", "--api-key-file", path, "--cost-model", "1,2,3,4",
                    "--fixed-cost-model", "--max-header-bytes", "4096", "--request-timeout-ms", "500", NULL};
    ck_assert_int_eq(parse(&cfg, argv, err, sizeof err), 0);
    ck_assert_int_eq(cfg.n_api_keys, 3);
    ck_assert_str_eq(cfg.api_keys[0], "sk-flag");
    ck_assert_str_eq(cfg.api_keys[1], "sk-a");
    ck_assert_str_eq(cfg.api_keys[2], "sk-b");
    ck_assert_ptr_null(cfg.api_keys[3]);
    ck_assert_str_eq(cfg.cost_model, "1,2,3,4");
    ck_assert_int_eq(cfg.fixed_cost_model, 1);
    ck_assert_int_eq(cfg.max_header_bytes, 4096);
    ck_assert_int_eq(cfg.request_timeout_ms, 500);
    wf_config_free(&cfg);
    unlink(path);
}
END_TEST

START_TEST(bad_key_files) {
    wf_config cfg;
    char err[256];
    char *argv[] = {"weftd", "--api-key-file", "/nonexistent/keys", NULL};
    ck_assert_int_eq(parse(&cfg, argv, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/keys"));
    wf_config_free(&cfg);
    char *path = write_tmp("# only a comment\n\n");
    char *argv2[] = {"weftd", "--api-key-file", path, NULL};
    ck_assert_int_eq(parse(&cfg, argv2, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "no keys"));
    wf_config_free(&cfg);
    unlink(path);
    char *argv3[] = {"weftd", "--max-header-bytes", "10", NULL};
    ck_assert_int_eq(parse(&cfg, argv3, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "max-header-bytes"));
    wf_config_free(&cfg);
}
END_TEST

START_TEST(json_file_keys) {
    char *path = write_tmp("{\"api_key\": [\"k1\", \"k2\"], \"request_timeout_ms\": 1234, \"fixed_cost_model\": true}");
    char file[64];
    snprintf(file, sizeof file, "%s", path);
    wf_config cfg;
    char err[256];
    char *argv[] = {"weftd", "--config", file, NULL};
    ck_assert_msg(parse(&cfg, argv, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(cfg.n_api_keys, 2);
    ck_assert_int_eq(cfg.request_timeout_ms, 1234);
    ck_assert_int_eq(cfg.fixed_cost_model, 1);
    wf_config_free(&cfg);
    unlink(file);
}
END_TEST

/* --model is repeatable: GGUFs and DiT folders are told apart, --model-name pairs by position. */
START_TEST(models_of_both_kinds) {
    wf_config cfg;
    char err[256];
    const char *dit = WEFT_SOURCE_DIR "/deploy/models/weft-dit-digits";
    char *argv[] = {"weftd", "--model", "/m/a.gguf", "--model", (char *)dit, "--model-name", "text",
                    "--model-name", "digits", "--image-chunk-steps", "4", "--image-batching=false", NULL};
    ck_assert_msg(parse(&cfg, argv, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(cfg.model, "/m/a.gguf");
    ck_assert_str_eq(cfg.model_name, "text");
    ck_assert_int_eq(cfg.n_dits, 1);
    ck_assert_str_eq(cfg.dit_models[0], dit);
    ck_assert_str_eq(cfg.dit_names[0], "digits");
    ck_assert_int_eq(cfg.image_chunk_steps, 4);
    ck_assert_int_eq(cfg.image_batching, 0);
    ck_assert_ptr_null(cfg.image_order); /* edf */
    wf_config_free(&cfg);
    char *argv_o[] = {"weftd", "--model", (char *)dit, "--image-order", "fcfs", NULL};
    ck_assert_msg(parse(&cfg, argv_o, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(cfg.image_order, "fcfs");
    wf_config_free(&cfg);
    char *argv_bad[] = {"weftd", "--model", (char *)dit, "--image-order", "lifo", NULL};
    ck_assert_int_eq(parse(&cfg, argv_bad, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "--image-order must be edf or fcfs"));
    wf_config_free(&cfg);
    /* --dit-policy is judged by the policy module's parser: K must fit the workers */
    char *argv_p[] = {"weftd", "--model", (char *)dit, "--workers", "2", "--dit-policy", "static:2", NULL};
    ck_assert_msg(parse(&cfg, argv_p, err, sizeof err) == 0, "%s", err);
    wf_config_free(&cfg);
    char *argv_pk[] = {"weftd", "--model", (char *)dit, "--workers", "2", "--dit-policy", "static:4", NULL};
    ck_assert_int_eq(parse(&cfg, argv_pk, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "--dit-policy 'static:4'") && strstr(err, "at most the 2 ranks"), "%s", err);
    wf_config_free(&cfg);
    char *argv_pr[] = {"weftd", "--model", (char *)dit, "--workers", "2", "--dit-policy", "rssp:256", NULL};
    ck_assert_int_eq(parse(&cfg, argv_pr, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "rssp:TOKENS=P"), "%s", err);
    wf_config_free(&cfg);
    /* an rssp map naming a degree the 2 workers cannot form: refused at start, naming the entry
     * (it was clamped to 2 at run time) */
    char *argv_pr4[] = {"weftd", "--model", (char *)dit, "--workers", "2", "--dit-policy", "rssp:64=4", NULL};
    ck_assert_int_eq(parse(&cfg, argv_pr4, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "--dit-policy 'rssp:64=4'") && strstr(err, "64=4") && strstr(err, "at most the 2 ranks"),
                  "%s", err);
    wf_config_free(&cfg);
    /* --dit-policy without a DiT, and two DiTs on the workers: refused before anything loads */
    char *argv_nd[] = {"weftd", "--model", "/m/a.gguf", "--workers", "2",
                       "--dit-policy", "static:2", NULL};
    ck_assert_int_eq(parse(&cfg, argv_nd, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "--dit-policy places DiT chunks, but no --model is a DiT"), "%s", err);
    wf_config_free(&cfg);
    char *argv_2d[] = {"weftd", "--model", (char *)dit, "--model", (char *)dit, "--workers", "2", NULL};
    ck_assert_int_eq(parse(&cfg, argv_2d, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "--workers serves one DiT model (got 2)"), "%s", err);
    wf_config_free(&cfg);
    /* a DiT alone: the default LLM is served beside it */
    char *argv2[] = {"weftd", "--model", (char *)dit, NULL};
    ck_assert_msg(parse(&cfg, argv2, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(cfg.model);
    ck_assert_int_eq(cfg.n_dits, 1);
    ck_assert_ptr_null(cfg.dit_names[0]);
    wf_config_free(&cfg);
    /* two LLMs: a clear error */
    char *argv3[] = {"weftd", "--model", "/m/a.gguf", "--model", "/m/b.gguf", NULL};
    ck_assert_int_eq(parse(&cfg, argv3, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "both LLMs"));
    wf_config_free(&cfg);
    /* more names than models */
    char *argv4[] = {"weftd", "--model", "/m/a.gguf", "--model-name", "x", "--model-name", "y", NULL};
    ck_assert_int_eq(parse(&cfg, argv4, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "--model-name"));
    wf_config_free(&cfg);
    /* the JSON file takes a list */
    char *file = write_tmp("{\"model\": [\"/m/c.gguf\"], \"model_name\": \"c\"}");
    char *argv5[] = {"weftd", "--config", file, NULL};
    ck_assert_msg(parse(&cfg, argv5, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(cfg.model, "/m/c.gguf");
    ck_assert_str_eq(cfg.model_name, "c");
    ck_assert_int_eq(cfg.n_dits, 0);
    wf_config_free(&cfg);
    unlink(file);
}
END_TEST

/* --vmodel flags and the config file's "vmodel" list (strings in the flag's form or objects),
 * checked at parse time; with --workers they are refused. */
START_TEST(vmodels_from_flags_and_file) {
    char *path = write_tmp("{\"vmodel\": [\"id=a,adapter=/x.gguf:0.5\", {\"id\": \"b\", "
                           "\"adapter\": \"/y\", \"weight\": 2}], \"adapter_memory_mb\": 8}");
    char file[64];
    snprintf(file, sizeof file, "%s", path);
    wf_config cfg;
    char err[256];
    char *argv[] = {"weftd", "--config", file, "--vmodel", "id=c,adapter=/z,system=Hi, there", NULL};
    ck_assert_msg(parse(&cfg, argv, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(cfg.n_vmodels, 3);
    ck_assert_str_eq(cfg.vmodels[2], "id=c,adapter=/z,system=Hi, there");
    ck_assert_int_eq(cfg.adapter_memory_mb, 8);
    wf_config_free(&cfg);
    char *bad[] = {"weftd", "--vmodel", "id=c,adaptr=/z", NULL};
    ck_assert_int_ne(parse(&cfg, bad, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "adaptr"), "%s", err);
    wf_config_free(&cfg);
    /* with worker processes too (they load the declarations themselves) */
    char *workers[] = {"weftd", "--workers", "2", "--vmodel", "id=c,adapter=/z", NULL};
    ck_assert_msg(parse(&cfg, workers, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(cfg.n_vmodels, 1);
    wf_config_free(&cfg);
    char *json_bad[] = {"weftd", "--vmodel", "{\"id\": 1}", NULL};
    ck_assert_int_ne(parse(&cfg, json_bad, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "'id'"), "%s", err);
    wf_config_free(&cfg);
    unlink(file);
}
END_TEST

static Suite *config_suite(void) {
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, defaults);
    tcase_add_test(tc, api_keys_from_flags_and_file);
    tcase_add_test(tc, bad_key_files);
    tcase_add_test(tc, json_file_keys);
    tcase_add_test(tc, vmodels_from_flags_and_file);
    tcase_add_test(tc, models_of_both_kinds);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(config_suite)
