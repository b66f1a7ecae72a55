/*
 * test_cli.c — the `sluice` command end to end: exit codes, messages, outputs (runs $SLUICE_BIN).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "sluice.h"
#include "test.h"

static const char *bin(void) {
    const char *b = getenv("SLUICE_BIN");
    return b ? b : "build/sluice";
}

TEST(cli_pack_info_verify) {
    char *o = NULL;
    const char *m = test_path("%s/cli.sluice", test_tmpdir());
    int rc = test_sh(1, &o, "%s pack tests/data/qwen3_5_fused -o %s", bin(), m);
    CHECKF(rc == 0, "%s", o);
    free(o);
    rc = test_sh(1, &o, "%s info %s", bin(), m);
    int ok = rc == 0 && strstr(o, "qwen3_5_moe") && strstr(o, "LmLmAmLm") && strstr(o, "bf16");
    CHECKF(ok, "%s", o);
    free(o);
    rc = test_sh(1, &o, "%s info %s --json", bin(), m);
    cJSON *j = cJSON_Parse(o);
    ok = rc == 0 && j && cJSON_GetObjectItem(cJSON_GetObjectItem(j, "experts"), "stride")->valueint == 12288;
    cJSON_Delete(j);
    CHECKF(ok, "%s", o);
    free(o);
    rc = test_sh(1, &o, "%s verify %s --source tests/data/qwen3_5_fused", bin(), m);
    CHECKF(rc == 0 && strstr(o, "ok"), "%s", o);
    free(o);
}

TEST(cli_errors_are_one_clear_line) {
    char *o = NULL;
    int rc = test_sh(1, &o, "%s pack tests/data/does-not-exist -o %s/x.sluice", bin(), test_tmpdir());
    int ok = rc != 0 && strstr(o, "does-not-exist") && strstr(o, "config.json") && !test_exists(test_path("%s/x.sluice", test_tmpdir()));
    CHECKF(ok, "rc %d: %s", rc, o);
    free(o);
    /* a file that is neither a checkpoint directory nor a GGUF file: named as such, not ".../config.json:
     * Not a directory" (issue 30) */
    rc = test_sh(1, &o, "%s pack README.md -o %s/x.sluice", bin(), test_tmpdir());
    ok = rc == 1 && strstr(o, "README.md: neither a checkpoint directory") && strstr(o, "nor a GGUF file") &&
         !strstr(o, "Not a directory") && !test_exists(test_path("%s/x.sluice", test_tmpdir()));
    CHECKF(ok, "rc %d: %s", rc, o);
    free(o);
    /* a file too short to hold a header, and a long enough one with the wrong magic: exit 1, one line
     * naming the file and what is wrong with it */
    rc = test_sh(1, &o, "%s info tests/data/qwen3_next/config.json", bin());
    ok = rc == 1 && strstr(o, "tests/data/qwen3_next/config.json") && strstr(o, "too short for a .sluice container") &&
         strchr(o, '\n') == o + strlen(o) - 1;
    CHECKF(ok, "rc %d: %s", rc, o);
    free(o);
    rc = test_sh(1, &o, "%s info README.md", bin());
    ok = rc == 1 && strstr(o, "README.md: not a .sluice container") && strchr(o, '\n') == o + strlen(o) - 1;
    CHECKF(ok, "rc %d: %s", rc, o);
    free(o);
    /* a text file given as a model: the same words as info, not the tokenizer's "not valid JSON" (issue 30) */
    rc = test_sh(1, &o, "%s run -m README.md -p hi -n 1", bin());
    ok = rc == 1 && strstr(o, "README.md: not a .sluice container (bad magic)") && strchr(o, '\n') == o + strlen(o) - 1;
    CHECKF(ok, "rc %d: %s", rc, o);
    free(o);
    /* numeric options out of range: refused with the accepted range named (issue 30) */
    static const char *const bad[][2] = {
        {"-p hi -n -5", "option '-n' must be a whole number between 1 and "},
        {"-p hi --temp -1", "option '--temp' must be between 0 and "},
        {"-p hi --top-k 1.5", "option '--top-k' must be a whole number between 0 and "},
        {"-p hi --min-p 1.5", "option '--min-p' must be between 0 and 1, not '1.5'"},
        {"-p hi --threads 0", "option '--threads' must be a whole number between 1 and "},
        {"--tokens 1 -n -5", "option '-n' must be a whole number between 1 and "},
        {"--tokens 1 --io-depth 0", "option '--io-depth' must be a whole number between 1 and "},
        {"-p hi -n x", "option '-n': 'x' is not a number"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        rc = test_sh(1, &o, "%s run -m models/demo.sluice %s", bin(), bad[k][0]);
        CHECKF(rc == 1 && strstr(o, bad[k][1]) && strchr(o, '\n') == o + strlen(o) - 1, "%s -> rc %d: %s", bad[k][0], rc, o);
        free(o);
    }
    rc = test_sh(1, &o, "%s frobnicate", bin());
    CHECKF(rc == 2 && strstr(o, "unknown command"), "rc %d: %s", rc, o);
    free(o);
}

/* --gpu where it cannot run (no CUDA build, no device): exit 1 and one line saying why (no crash, nothing else printed). */
TEST(cli_gpu_is_one_clear_error) {
    char *o = NULL;
    int rc = test_sh(1, &o, "%s run -m models/demo.sluice --gpu -p hi -n 1", bin());
#ifdef SL_CUDA
    int named = strstr(o, "no usable CUDA device") != NULL;
#else
    int named = strstr(o, "built without CUDA") != NULL;
#endif
    CHECKF(rc == 1 && named && strchr(o, '\n') == o + strlen(o) - 1, "rc %d: %s", rc, o);
    free(o);
    /* --cpu, and the default (auto: the CPU where no GPU is usable), run; --cpu's help names the default */
    rc = test_sh(1, &o, "%s run -m models/demo.sluice --cpu -p hi -n 1 --temp 0 && %s run -m models/demo.sluice -p hi -n 1 "
                 "--temp 0", bin(), bin());
    CHECKF(rc == 0, "rc %d: %s", rc, o);
    free(o);
    rc = test_sh(0, &o, "%s run --help", bin());
    CHECKF(rc == 0 && strstr(o, "  --cpu ") && strstr(o, "(default: auto"), "rc %d: %s", rc, o);
    free(o);
}

TEST(cli_run_and_logits) {
    const char *m = test_packed("qwen3_next");
    CHECK(m);
    char *o = NULL;
    /* the reference prompt's first 20 tokens; compare run --ids with an explicit greedy loop over logits */
    char *txt = test_read("tests/data/qwen3_next/ref.json", NULL);
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    char toks[2048] = "";
    const cJSON *it;
    int n = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "tokens")) {
        size_t l = strlen(toks);
        snprintf(toks + l, sizeof toks - l, n ? ",%d" : "%d", it->valueint);
        n++;
    }
    char want[512] = "";
    n = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "greedy")) {
        size_t l = strlen(want);
        snprintf(want + l, sizeof want - l, n++ ? " %d" : "%d", it->valueint);
    }
    cJSON_Delete(j);
    int rc = test_sh(1, &o, "%s run -m %s --tokens %s -n 16 --temp 0 --ids", bin(), m, toks);
    CHECKF(rc == 0 && !strncmp(o, want, strlen(want)), "rc %d: got '%s' want '%s'", rc, o, want);
    free(o);
    /* logits of the whole reference prompt: every row bitwise what the library gives in process, and
     * within 1e-4 (relative to the row's largest) of transformers' */
    const char *lf = test_path("%s/logits.f32", test_tmpdir());
    rc = test_sh(1, &o, "%s logits -m %s --tokens %s -o %s --kv f32", bin(), m, toks, lf); /* -o as every command (issue 30) */
    CHECKF(rc == 0, "rc %d: %s", rc, o);
    free(o);
    const char *lf2 = test_path("%s/logits2.f32", test_tmpdir()); /* --out stays an alias */
    rc = test_sh(1, &o, "%s logits -m %s --tokens 1 --out %s", bin(), m, lf2);
    CHECKF(rc == 0 && test_exists(lf2), "rc %d: %s", rc, o);
    free(o);
    int32_t ids[256];
    int nt = test_ref_ids("qwen3_next", "tokens", ids, 256);
    CHECK(nt > 0);
    size_t len = 0, ref_len = 0;
    float *got = (float *)test_read(lf, &len), *ref = (float *)test_read("tests/data/qwen3_next/ref_logits.f32", &ref_len);
    sl_model *lm = NULL;
    sl_session *s = NULL;
    sl_error err = {0};
    float *lib = malloc((size_t)nt * 256 * sizeof(float));
    for (int i = 0; i < nt * 256; i++) lib[i] = NAN; /* poison: the library must write every row */
    int st = sl_model_open(m, NULL, &lm, &err) || sl_session_new(lm, 0, &s) || sl_session_eval(s, ids, nt, lib, 1);
    sl_session_free(s);
    sl_model_close(lm);
    int ok = !st && got && ref && len == (size_t)nt * 256 * 4 && ref_len == len && !memcmp(got, lib, len);
    double worst = 0;
    for (int t = 0; ok && t < nt; t++) {
        double d = 0, mx = 0;
        for (int v = 0; v < 256; v++) {
            double x = fabs((double)got[t * 256 + v] - ref[t * 256 + v]);
            if (isnan(x)) x = INFINITY;
            if (x > d) d = x;
            if (fabs(ref[t * 256 + v]) > mx) mx = fabs(ref[t * 256 + v]);
        }
        if (d / mx > worst) worst = d / mx;
    }
    free(got);
    free(ref);
    free(lib);
    CHECKF(ok && worst < 1e-4, "logits file: %zu bytes for %d tokens, differs from the library's or %.3g from transformers'",
           len, nt, worst);
    rc = test_sh(1, &o, "%s run -m %s --tokens 1,999999 -n 2", bin(), m);
    CHECKF(rc != 0 && strstr(o, "999999"), "rc %d: %s", rc, o);
    free(o);
}

TEST(cli_synth_bench_profile) {
    char *o = NULL;
    const char *m = test_path("%s/synth-tiny.sluice", test_tmpdir());
    int rc = test_sh(1, &o, "%s synth --shape tiny -o %s", bin(), m);
    CHECKF(rc == 0, "%s", o);
    free(o);
    rc = test_sh(1, &o, "%s verify %s", bin(), m);
    CHECKF(rc == 0, "%s", o);
    free(o);
    rc = test_sh(1, &o, "%s bench -m %s --prompt 8 --gen 4 --cache 200K --cache 1M --json 2>/dev/null", bin(), m);
    cJSON *j = cJSON_Parse(o);
    int ok = rc == 0 && cJSON_GetArraySize(j) == 2;
    for (int i = 0; ok && i < 2; i++) {
        const cJSON *r = cJSON_GetArrayItem(j, i);
        ok = cJSON_GetObjectItem(r, "decode_tok_s")->valuedouble > 0 && cJSON_GetObjectItem(r, "hit_rate")->valuedouble >= 0 &&
             cJSON_GetObjectItem(r, "peak_rss_bytes")->valuedouble > 0 &&
             cJSON_GetArraySize(cJSON_GetObjectItem(r, "layers")) == 4;
    }
    /* a bigger cache never reads more per token than a smaller one on the same workload */
    ok = ok && cJSON_GetObjectItem(cJSON_GetArrayItem(j, 1), "bytes_per_token")->valuedouble <=
                   cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "bytes_per_token")->valuedouble;
    cJSON_Delete(j);
    CHECKF(ok, "rc %d: %s", rc, o);
    free(o);
    /* a synthetic model decodes random ids; --routing uniform is recorded in the row; bad values refused */
    rc = test_sh(1, &o, "%s bench -m %s --prompt 4 --gen 4 --routing uniform --seed 5 --json 2>/dev/null", bin(), m);
    j = cJSON_Parse(o);
    const cJSON *r0 = cJSON_GetArrayItem(j, 0);
    ok = rc == 0 && r0 && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(r0, "routing")), "uniform") &&
         !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(r0, "decode_ids")), "random") &&
         cJSON_GetObjectItem(r0, "routing_seed")->valuedouble == 5;
    cJSON_Delete(j);
    CHECKF(ok, "rc %d: %s", rc, o);
    free(o);
    rc = test_sh(1, &o, "%s bench -m %s --prompt 4 --gen 2 --decode greedy --json 2>/dev/null", bin(), m);
    j = cJSON_Parse(o);
    r0 = cJSON_GetArrayItem(j, 0);
    ok = rc == 0 && r0 && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(r0, "routing")), "model") &&
         !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(r0, "decode_ids")), "greedy");
    cJSON_Delete(j);
    CHECKF(ok, "rc %d: %s", rc, o);
    free(o);
    /* resident: an untimed warm-up first (its own session), or none with --no-warmup; prompt 0 too */
    for (int w = 0; w < 3; w++) {
        rc = test_sh(1, &o, "%s bench -m %s --resident --prompt %d --gen 3 %s --json 2>/dev/null", bin(), m, w == 2 ? 0 : 4,
                     w == 1 ? "--no-warmup" : "");
        j = cJSON_Parse(o);
        r0 = cJSON_GetArrayItem(j, 0);
        ok = rc == 0 && r0 && cJSON_GetObjectItem(r0, "decode_tok_s")->valuedouble > 0 &&
             cJSON_GetObjectItem(r0, "bytes_per_token")->valuedouble == 0;
        cJSON_Delete(j);
        CHECKF(ok, "warm-up %d: rc %d: %s", w, rc, o);
        free(o);
    }
    /* --warm-cache: a cache that holds every expert is filled before timing, so the timed run reads nothing; without
     * it the same run reads its experts (the default is unchanged) */
    for (int w = 0; w < 2; w++) {
        rc = test_sh(1, &o, "%s bench -m %s --prompt 8 --gen 3 --cache 64M %s --json 2>/dev/null", bin(), m,
                     w ? "--warm-cache" : "");
        j = o && strchr(o, '[') ? cJSON_Parse(strchr(o, '[')) : NULL; /* (after the line saying what was read) */
        r0 = cJSON_GetArrayItem(j, 0);
        ok = rc == 0 && r0 && cJSON_IsTrue(cJSON_GetObjectItem(r0, "warm_cache")) == w &&
             (cJSON_GetObjectItem(r0, "warm_cache_experts")->valuedouble > 0) == w &&
             (cJSON_GetObjectItem(r0, "prefill_bytes")->valuedouble == 0) == w &&
             (cJSON_GetObjectItem(r0, "hit_rate")->valuedouble == 1) == w;
        cJSON_Delete(j);
        CHECKF(ok, "--warm-cache %d: rc %d: %s", w, rc, o);
        free(o);
    }
    /* bench's and synth's numbers are checked as every command's are (opts.c cli_num): the range named */
    rc = test_sh(1, &o, "%s bench -m %s --gen x2", bin(), m);
    CHECKF(rc == 1 && strstr(o, "option '--gen': 'x2' is not a number"), "rc %d: %s", rc, o);
    free(o);
    rc = test_sh(1, &o, "%s bench -m %s --prompt -3", bin(), m);
    CHECKF(rc == 1 && strstr(o, "option '--prompt' must be a whole number between 0 and 1048576, not '-3'"), "rc %d: %s", rc, o);
    free(o);
    rc = test_sh(1, &o, "%s synth --shape tiny --layers 1.5 -o %s/never.sluice", bin(), test_tmpdir());
    CHECKF(rc == 1 && strstr(o, "option '--layers' must be a whole number between 0 and 65536, not '1.5'"), "rc %d: %s", rc, o);
    free(o);
    rc = test_sh(1, &o, "%s bench -m %s --routing sideways", bin(), m);
    CHECKF(rc != 0 && strstr(o, "--routing 'sideways'"), "rc %d: %s", rc, o);
    free(o);
    const char *prof = test_path("%s/tiny.profile", test_tmpdir());
    rc = test_sh(1, &o, "%s profile -m %s --tokens 1,2,3,4,5,6,7,8,9 -o %s", bin(), m, prof);
    CHECKF(rc == 0 && test_file_size(prof) > 0, "rc %d: %s", rc, o);
    free(o);
    rc = test_sh(1, &o, "%s run -m %s --tokens 1,2,3 -n 4 --ids --stats --pin %s --cache 300K --policy lfu", bin(), m, prof);
    CHECKF(rc == 0 && strstr(o, "hit rate") && strstr(o, "peak RSS"), "rc %d: %s", rc, o);
    free(o);
    rc = test_sh(1, &o, "%s run -m %s --tokens 1,2,3 -n 4 --cache lots", bin(), m);
    CHECKF(rc != 0 && strstr(o, "--cache"), "rc %d: %s", rc, o);
    free(o);
    const char *q = test_path("%s/synth-tiny-q4.sluice", test_tmpdir());
    rc = test_sh(1, &o, "%s synth --shape tiny --quant q4 -o %s && %s verify %s && %s info %s && %s run -m %s --tokens 1,2 -n 3 --ids --cache 100K",
            bin(), q, bin(), q, bin(), q, bin(), q);
    CHECKF(rc == 0 && strstr(o, "q4"), "rc %d: %s", rc, o);
    free(o);
    rc = test_sh(1, &o, "%s synth --shape nonesuch -o %s/x.sluice", bin(), test_tmpdir());
    CHECKF(rc != 0 && strstr(o, "qwen3-next-80b-a3b"), "rc %d: %s", rc, o);
    free(o);
}

/* tokenize without -m falls back to the default model as run does (issue 30): $SLUICE_MODEL, set here to the
 * tree's demo model (the fallback is ../models/ from the binary's folder: absent for build/asan/sluice) */
TEST(cli_tokenize_default_model) {
    char *a = NULL, *b = NULL;
    int ra = test_sh(1, &a, "env SLUICE_MODEL=models/demo.sluice %s tokenize 'Hello, world'", bin());
    int rb = test_sh(1, &b, "%s tokenize -m models/demo.sluice 'Hello, world'", bin());
    CHECKF(ra == 0 && rb == 0 && !strcmp(a, b) && a[0] >= '0' && a[0] <= '9', "rc %d %d: '%s' vs '%s'", ra, rb, a, b);
    free(a);
    free(b);
}

/* chat: /help lists the slash commands (was "unknown command"), an unknown one points at /help, chat --help
 * lists --save, --load and /save, and Ctrl-D on a terminal leaves a newline (issue 30) */
TEST(cli_chat_help_and_eof) {
    char *o = NULL;
    int rc = test_sh(1, &o, "printf '/help\\n/bogus\\n' | %s chat -m models/demo.sluice -n 2 --temp 0", bin());
    int ok = rc == 0 && strstr(o, "/save FILE") && strstr(o, "/think on|off") && strstr(o, "/quit") &&
             strstr(o, "unknown command /bogus (/help lists them)");
    CHECKF(ok, "rc %d: %s", rc, o);
    free(o);
    rc = test_sh(1, &o, "%s chat --help", bin());
    CHECKF(rc == 0 && strstr(o, "--save FILE") && strstr(o, "--load FILE") && strstr(o, "/save FILE") && strstr(o, "/help"),
           "rc %d: %s", rc, o);
    free(o);
    /* Ctrl-D at the prompt of a terminal (a pty): the output ends with a newline */
    rc = test_sh(1, &o, "python3 -c \"import pty,os,sys,time\n"
                        "pid,fd=pty.fork()\n"
                        "if pid==0: os.execv('%s',['sluice','chat','-m','models/demo.sluice','-n','2'])\n"
                        "time.sleep(1); os.write(fd,b'\\x04'); out=b''\n"
                        "while True:\n"
                        "  try: d=os.read(fd,4096)\n"
                        "  except OSError: break\n"
                        "  if not d: break\n"
                        "  out+=d\n"
                        "sys.stdout.write('END' if out.endswith(b'\\n') else 'NOEOL '+repr(out[-20:]))\"", bin());
    CHECKF(rc == 0 && !strcmp(o, "END"), "rc %d: %s", rc, o);
    free(o);
}
