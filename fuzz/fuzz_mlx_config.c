/* fuzz_mlx_config.c — MLX's quantization block of config.json (import/mlx.c), and the per-module lookup. */
#include <cjson/cJSON.h>

#include "fuzz.h"
#include "import/mlx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cJSON *root = cJSON_ParseWithLength((const char *)data, size);
    if (!root) return 0;
    mlx_quant q;
    sl_error err;
    if (mlx_parse_quant(root, "config.json", &q, &err) == SL_OK && q.bits) {
        int bits, group;
        mlx_module_params(&q, "model.layers.0.mlp.experts.0.gate_proj", &bits, &group);
        mlx_module_params(&q, "lm_head", &bits, &group);
        int64_t ws[2] = {64, 8}, ss[2] = {64, 1}, cols = 0;
        mlx_check_module("model.layers.0.self_attn.q_proj", bits, group, 2, ws, 2, ss, 2, ss, DT_BF16, DT_BF16, &cols,
                         &err);
        mlx_quant_free(&q);
    }
    cJSON_Delete(root);
    return 0;
}
