/*
 * cmd_pack.c — `sluice pack`, `sluice info`, `sluice verify`.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static int parse_quant(const char *q, sl_quant *out) {
    static const char *const names[] = {"keep", "f32", "bf16", "q8", "q4", "q3", "q2", "q2v"};
    for (int i = 0; i < 8; i++)
        if (!strcmp(q, names[i])) {
            *out = (sl_quant)i;
            return 0;
        }
    return -1;
}

int cmd_pack(int argc, char **argv) {
    const char *src = NULL, *out = NULL;
    sl_pack_params p = sl_pack_params_default();
    for (int i = 1; i < argc; i++) {
        sl_quant *role = !strcmp(argv[i], "--quant") ? &p.quant
                         : !strcmp(argv[i], "--quant-experts") ? &p.quant_experts
                         : !strcmp(argv[i], "--quant-backbone") ? &p.quant_backbone
                         : !strcmp(argv[i], "--quant-router") ? &p.quant_router : NULL;
        if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (role && i + 1 < argc) {
            const char *q = argv[++i];
            if (parse_quant(q, role)) return cli_fail("pack", "unknown %s '%s' (keep, f32, bf16, q8, q4, q3)", argv[i - 1], q);
        } else if (!strcmp(argv[i], "--group") && i + 1 < argc) {
            char *end;
            long g = strtol(argv[++i], &end, 10);
            if (*end || (g != 32 && g != 64 && g != 128)) return cli_fail("pack", "--group must be 32, 64 or 128, not '%s'", argv[i]);
            p.group = (int)g;
        } else if (!strcmp(argv[i], "--scale-f16")) p.scale_f16 = 1;
        else if (!strcmp(argv[i], "--no-source-hash")) p.hash_sources = 0;
        else if (!strcmp(argv[i], "--imatrix") && i + 1 < argc) p.imatrix = argv[++i];
        else if (argv[i][0] == '-') return cli_bad_option("pack", argc, argv, i);
        else if (!src) src = argv[i];
        else return cli_fail("pack", "unexpected argument '%s'", argv[i]);
    }
    if (!src || !out)
        return cli_fail("pack", "usage: sluice pack SRC_DIR -o MODEL.sluice [--quant keep|f32|bf16|q8|q4|q3] [--group 32|64|128] "
                        "[--quant-experts M] [--quant-backbone M] [--quant-router M] [--scale-f16] [--imatrix FILE]");
    cli_progress pr;
    cli_progress_init(&pr, "packing");
    p.progress = cli_progress_cb;
    p.progress_user = &pr;
    sl_error err = {0};
    cli_remove_stale("pack", out);
    sl_status st = sl_pack(src, out, &p, &err);
    cli_progress_end(&pr);
    if (st) return cli_fail("pack", "%s", err.msg);
    fprintf(stderr, "wrote %s in %.1f s\n", out, clk_now_s() - pr.t0);
    char *txt = NULL;
    if (p.imatrix && !sl_info_json(out, &txt, &err)) { /* what the importance matrix covered */
        cJSON *j = cJSON_Parse(txt);
        const cJSON *im = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "pack"), "imatrix");
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(im, "weighted"), *u = cJSON_GetObjectItemCaseSensitive(im, "unweighted");
        if (cJSON_IsNumber(w) && cJSON_IsNumber(u))
            fprintf(stderr, "imatrix %s: %.0f quantized matrices weighted, %.0f without importances (no entry, or an expert "
                    "that saw no token)\n", p.imatrix, w->valuedouble, u->valuedouble);
        cJSON_Delete(j);
    }
    free(txt);
    return 0;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (argv[i][0] == '-') return cli_bad_option("info", argc, argv, i);
        else path = argv[i];
    }
    if (!path) return cli_fail("info", "usage: sluice info MODEL.sluice [--json]");
    char *txt = NULL;
    sl_error err = {0};
    if (sl_info_json(path, &txt, &err)) return cli_fail("info", "%s", err.msg);
    if (json) {
        printf("%s\n", txt);
        free(txt);
        return 0;
    }
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "config"), *ex = cJSON_GetObjectItemCaseSensitive(j, "experts");
    printf("file        %s (%.1f MiB)\n", path, num(j, "file_bytes") / 1048576.0);
    printf("arch        %s\n", cJSON_GetObjectItemCaseSensitive(j, "arch")->valuestring);
    printf("dims        vocab %.0f, hidden %.0f, layers %.0f, heads %.0f (kv %.0f, head_dim %.0f, rope dims %.0f, "
           "theta %g)\n", num(c, "vocab"), num(c, "hidden"), num(c, "n_layers"), num(c, "n_heads"), num(c, "n_kv_heads"),
           num(c, "head_dim"), num(c, "rot_dim"), num(c, "rope_theta"));
    printf("moe         %.0f experts, %.0f per token, expert ffn %.0f, shared expert ffn %.0f, dense ffn %.0f, "
           "renormalise top-k %s\n", num(c, "n_experts"), num(c, "n_experts_used"), num(c, "moe_inter"),
           num(c, "shared_inter"), num(c, "dense_inter"), num(c, "norm_topk") ? "yes" : "no");
    if (cJSON_GetObjectItemCaseSensitive(c, "router")) /* containers of before the family tables lack them */
        printf("routing     %s; q/k norm %s; q/k/v bias %s\n",
               num(c, "router") == 4   ? "sqrt-softplus, bias-corrected top-k (hash layers: tid2eid)"
               : num(c, "router") == 3 ? "softmax, bias-corrected top-k"
               : num(c, "router") == 2 ? "sigmoid, bias-corrected group-limited top-k"
               : num(c, "router") == 1 ? "top-k of the logits, softmax over them" : "softmax, top-k",
               num(c, "qk_norm") == 2 ? "over the projection" : num(c, "qk_norm") == 1 ? "per head" : "none",
               num(c, "attn_bias") ? "yes" : "no");
    if (num(c, "kv_lora") > 0)
        printf("mla         q_lora %.0f, kv_lora %.0f, qk_nope %.0f, qk_rope %.0f, v_head %.0f, %s RoPE; cache %.0f floats "
               "per position and layer\n", num(c, "q_lora"), num(c, "kv_lora"), num(c, "qk_nope"), num(c, "rot_dim"),
               num(c, "v_head_dim"), num(c, "rope_interleave") ? "interleaved" : "rotate-half",
               num(c, "kv_lora") + num(c, "rot_dim"));
    if (num(c, "hc_mult") > 0)
        printf("deepseek-v4 %.0f hyper-connection streams (%.0f Sinkhorn steps), q_lora %.0f, output %.0f groups of %.0f, "
               "window %.0f, CSA rate %.0f (indexer %.0f x %.0f, top %.0f), HCA rate %.0f\n", num(c, "hc_mult"),
               num(c, "hc_iters"), num(c, "q_lora"), num(c, "o_groups"), num(c, "o_lora"), num(c, "sliding_window"),
               num(c, "csa_rate"), num(c, "idx_heads"), num(c, "idx_dim"), num(c, "idx_topk"), num(c, "hca_rate"));
    if (num(c, "lin_nk") > 0)
        printf("deltanet    key heads %.0f x %.0f, value heads %.0f x %.0f, conv kernel %.0f\n", num(c, "lin_nk"),
               num(c, "lin_dk"), num(c, "lin_nv"), num(c, "lin_dv"), num(c, "conv_k"));
    printf("layers      ");
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(c, "layer_types"), *lm = cJSON_GetObjectItemCaseSensitive(c, "layer_moe");
    for (int i = 0; i < cJSON_GetArraySize(lt); i++)
        printf("%c%c", !strcmp(cJSON_GetArrayItem(lt, i)->valuestring, "linear_attention")    ? 'L'
                       : !strcmp(cJSON_GetArrayItem(lt, i)->valuestring, "sliding_attention") ? 'S'
                                                                                               : 'A',
               cJSON_IsTrue(cJSON_GetArrayItem(lm, i)) ? 'm' : 'd');
    printf("   (A attention, S sliding-window attention, L DeltaNet; m MoE, d dense)\n");
    printf("experts     %.0f layers x %.0f, block %.0f bytes, stride %.0f, %s\n", num(ex, "moe_layers"),
           num(ex, "experts_per_layer"), num(ex, "block_bytes"), num(ex, "stride"),
           cJSON_GetObjectItemCaseSensitive(ex, "dtype")->valuestring);
    printf("bytes       backbone %.1f MiB, experts %.1f MiB\n", num(j, "backbone_bytes") / 1048576.0,
           num(j, "expert_bytes") / 1048576.0);
    const cJSON *pk = cJSON_GetObjectItemCaseSensitive(j, "pack"), *q = cJSON_GetObjectItemCaseSensitive(pk, "quant");
    const cJSON *qe = cJSON_GetObjectItemCaseSensitive(pk, "experts"), *qb = cJSON_GetObjectItemCaseSensitive(pk, "backbone");
    const cJSON *qr = cJSON_GetObjectItemCaseSensitive(pk, "router");
    if (cJSON_IsString(qe) && cJSON_IsString(qb) && cJSON_IsString(qr)) /* the modes per role (quantized packs) */
        printf("quant       experts %s, backbone %s, router %s, group %.0f", qe->valuestring, qb->valuestring,
               qr->valuestring, num(pk, "group"));
    else
        printf("quant       %s", cJSON_IsString(q) ? q->valuestring : "?");
    const cJSON *bd = cJSON_GetObjectItemCaseSensitive(j, "backbone_dtypes"), *it;
    printf(" (backbone:");
    cJSON_ArrayForEach(it, bd) printf(" %s %.1f MiB", it->string, it->valuedouble / 1048576.0);
    printf(")\n");
    const cJSON *im = cJSON_GetObjectItemCaseSensitive(pk, "imatrix"), *imf = cJSON_GetObjectItemCaseSensitive(im, "file");
    const cJSON *imx = cJSON_GetObjectItemCaseSensitive(im, "xxh3");
    if (cJSON_IsString(imf) && cJSON_IsString(imx))
        printf("imatrix     %s (xxh3 %s): %.0f matrices quantized under its importances\n", imf->valuestring,
               imx->valuestring, num(im, "weighted"));
    cJSON_Delete(j);
    return 0;
}

int cmd_verify(int argc, char **argv) {
    const char *path = NULL, *src = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--source") && i + 1 < argc) src = argv[++i];
        else if (argv[i][0] == '-') return cli_bad_option("verify", argc, argv, i);
        else path = argv[i];
    }
    if (!path) return cli_fail("verify", "usage: sluice verify MODEL.sluice [--source SRC_DIR]");
    cli_progress pr;
    cli_progress_init(&pr, "verifying");
    sl_error err = {0};
    sl_status st = sl_verify(path, src, cli_progress_cb, &pr, &err);
    cli_progress_end(&pr);
    if (st) return cli_fail("verify", "%s", err.msg);
    printf("%s: ok (every checksum%s)\n", path, src ? ", and every tensor equals the source" : "");
    return 0;
}
