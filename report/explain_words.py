"""The capacity planner's words in English and Chinese: value labels, section titles and notes.

A note is a code plus fields; `NOTES[lang][code]` is its sentence. The planner decides which
notes apply (report.explain_notes); this module only says them. Chinese text uses full-width
punctuation.
"""

from __future__ import annotations

LABELS = {
    "en": {
        "model": "Model", "gpu": "GPU", "settings": "Settings", "workload": "Workload",
        "layers": "layers", "heads": "Q heads", "kv_heads": "KV heads",
        "kv": "KV cache", "capacity": "Capacity", "roofline": "Roofline", "mha": "MHA counterfactual",
        "fit": "Fit on the GPU", "vllm": "What vLLM's log would say",
        "modelled": "Modelled", "not_modelled": "Not modelled", "warnings": "Warnings",
        "absent": "—", "because": "because",
        "peak_used": "MFU would divide by the dense {dtype} tensor peak (not the 2:4-sparse one).",
        "kv_dtype_bytes": "KV element size",
        "kv_layer_bytes_per_token": "KV bytes per token, one layer (per GPU)",
        "kv_bytes_per_token": "KV bytes per token (per GPU)",
        "kv_bytes_per_token_beyond_window": "KV bytes per token past every window",
        "kv_block_bytes": "Pool block (block × layers per group)",
        "kv_memory_bytes": "KV memory (per GPU)",
        "kv_pool_blocks": "KV pool blocks",
        "kv_pool_tokens": "KV pool (tokens per group)",
        "request_peak_tokens": "Context per request at its end (block-rounded)",
        "request_mean_tokens": "Context per request on average (block-rounded)",
        "request_peak_blocks": "Pool blocks per request at its end",
        "request_mean_blocks": "Pool blocks per request on average",
        "request_peak_kv_bytes": "KV bytes per request at its end",
        "expected_kv_peak_fraction": "Expected peak KV usage",
        "expected_kv_mean_fraction": "Expected mean KV usage",
        "block_alignment_waste_tokens": "Block-rounding waste per request",
        "block_alignment_waste_tokens_total": "Block-rounding waste, all C requests",
        "max_concurrency": "Most requests that fit at once",
        "max_input_len_at_concurrency": "Longest prompt at this C (tokens)",
        "max_input_len_at_concurrency_whole_blocks": "Longest prompt at this C, whole blocks",
        "peak_flops": "Peak tensor FLOP/s (dense)",
        "peak_flops_sparse": "Peak tensor FLOP/s (2:4 sparse)",
        "peak_bandwidth": "Peak memory bandwidth",
        "power_limit_w": "Power limit",
        "ridge_flops_per_byte": "Ridge point",
        "kv_bytes_per_token_at_decode_context": "KV bytes per extra token at the decode context",
        "itl_kv_slope_ms_per_token": "ITL slope from KV reads",
        "params_total": "Parameters (all experts)",
        "params_active": "Parameters active per token",
        "params_non_embedding": "Non-embedding parameters N",
        "params_active_non_embedding": "Active non-embedding parameters",
        "weight_bytes": "Weights in memory",
        "weight_bytes_per_gpu": "Weights per GPU",
        "weight_bytes_read_per_step": "Weights read per decode step",
        "flops_per_token": "FLOPs per token (2 × (active N + LM head))",
        "attention_flops_per_context_token": "Attention FLOPs per context token",
        "decode_context_len": "Mean decode context (in + out/2)",
        "flops_per_token_at_decode_context": "FLOPs per decode token at that context",
        "kv_bytes_read_per_request": "KV bytes one request reads per step",
        "decode_arithmetic_intensity": "Decode step arithmetic intensity",
        "prefill_weight_bytes_read": "Weights read by one prefill",
        "prefill_arithmetic_intensity": "Prefill arithmetic intensity",
        "mha_kv_bytes_per_token": "KV bytes per token if MHA",
        "mha_kv_pool_tokens": "KV pool if MHA",
        "mha_max_concurrency": "Most requests that fit if MHA",
        "mha_max_input_len_at_concurrency": "Longest prompt at this C if MHA",
        "gpu_memory_bytes": "GPU memory",
        "memory_budget_bytes": "vLLM's budget (× gpu-memory-utilization)",
        "kv_memory_ceiling_bytes": "KV memory ceiling (budget − weights)",
        "max_model_len": "max_model_len",
        "max_in_flight_tokens": "Tokens in flight (2 × max_num_batched_tokens)",
        "vllm_max_concurrency_logged": "Maximum concurrency at max_model_len",
        "vllm_kv_cache_tokens_logged": "KV cache size",
        "mha_sentence": "If this were MHA ({heads} KV heads), a token would take {kib} KiB, the pool "
                        "would hold {pool} tokens and L could be at most {maxl} at C={c}.",
        "mha_sentence_short": "If this were MHA ({heads} KV heads), a token would take {kib} KiB and "
                              "the pool would hold {pool} tokens.",
        "already_mha": "The model already has one KV head per query head (MHA).",
    },
    "zh": {
        "model": "模型", "gpu": "GPU", "settings": "设置", "workload": "负载",
        "layers": "层", "heads": "Q head", "kv_heads": "KV head",
        "kv": "KV 缓存", "capacity": "容量", "roofline": "屋顶线", "mha": "MHA 反事实",
        "fit": "显存是否放得下", "vllm": "vLLM 日志将显示",
        "modelled": "已建模", "not_modelled": "未建模", "warnings": "警告",
        "absent": "—", "because": "原因",
        "peak_used": "MFU 的分母取 {dtype} 张量核心「稠密」峰值（不是 2:4 稀疏峰值）。",
        "kv_dtype_bytes": "KV 元素字节数",
        "kv_layer_bytes_per_token": "单层每 token 的 KV 字节（每卡）",
        "kv_bytes_per_token": "每 token 的 KV 字节（每卡）",
        "kv_bytes_per_token_beyond_window": "超出所有窗口后每 token 的 KV 字节",
        "kv_block_bytes": "池块大小（块 × 每组层数）",
        "kv_memory_bytes": "KV 显存（每卡）",
        "kv_pool_blocks": "KV 池块数",
        "kv_pool_tokens": "KV 池（每组 token 数）",
        "request_peak_tokens": "单请求结束时的上下文（按块取整）",
        "request_mean_tokens": "单请求平均上下文（按块取整）",
        "request_peak_blocks": "单请求结束时占用的池块",
        "request_mean_blocks": "单请求平均占用的池块",
        "request_peak_kv_bytes": "单请求结束时的 KV 字节",
        "expected_kv_peak_fraction": "预期 KV 峰值占用",
        "expected_kv_mean_fraction": "预期 KV 平均占用",
        "block_alignment_waste_tokens": "每请求块对齐浪费",
        "block_alignment_waste_tokens_total": "C 条请求的块对齐浪费",
        "max_concurrency": "池子能同时容纳的请求数",
        "max_input_len_at_concurrency": "该并发下最长输入（按 token）",
        "max_input_len_at_concurrency_whole_blocks": "该并发下最长输入（整块）",
        "peak_flops": "张量核心峰值（稠密）",
        "peak_flops_sparse": "张量核心峰值（2:4 稀疏）",
        "peak_bandwidth": "显存带宽峰值",
        "power_limit_w": "功耗上限",
        "ridge_flops_per_byte": "脊点",
        "kv_bytes_per_token_at_decode_context": "解码上下文处每多一个 token 的 KV 字节",
        "itl_kv_slope_ms_per_token": "KV 读取带来的 ITL 斜率",
        "params_total": "参数量（全部专家）",
        "params_active": "每 token 激活参数量",
        "params_non_embedding": "非嵌入参数量 N",
        "params_active_non_embedding": "激活的非嵌入参数量",
        "weight_bytes": "权重占用",
        "weight_bytes_per_gpu": "每卡权重",
        "weight_bytes_read_per_step": "每个 decode 步读取的权重",
        "flops_per_token": "每 token FLOPs（2 ×（激活 N + LM head））",
        "attention_flops_per_context_token": "每个上下文 token 的注意力 FLOPs",
        "decode_context_len": "解码平均上下文（输入 + 输出/2）",
        "flops_per_token_at_decode_context": "该上下文下每个解码 token 的 FLOPs",
        "kv_bytes_read_per_request": "单请求每步读取的 KV 字节",
        "decode_arithmetic_intensity": "decode 步算术强度",
        "prefill_weight_bytes_read": "一次 prefill 读取的权重",
        "prefill_arithmetic_intensity": "prefill 算术强度",
        "mha_kv_bytes_per_token": "若为 MHA，每 token 的 KV 字节",
        "mha_kv_pool_tokens": "若为 MHA，KV 池",
        "mha_max_concurrency": "若为 MHA，能同时容纳的请求数",
        "mha_max_input_len_at_concurrency": "若为 MHA，该并发下最长输入",
        "gpu_memory_bytes": "GPU 显存",
        "memory_budget_bytes": "vLLM 可用显存（× gpu-memory-utilization）",
        "kv_memory_ceiling_bytes": "KV 显存上限（可用显存 − 权重）",
        "max_model_len": "max_model_len",
        "max_in_flight_tokens": "在途 token（2 × max_num_batched_tokens）",
        "vllm_max_concurrency_logged": "max_model_len 下的最大并发",
        "vllm_kv_cache_tokens_logged": "KV cache size",
        "mha_sentence": "如果是 MHA（{heads} 个 KV head），每 token 要 {kib} KiB，池子只能放 {pool} "
                        "token，C={c} 时 L 最多 {maxl}。",
        "mha_sentence_short": "如果是 MHA（{heads} 个 KV head），每 token 要 {kib} KiB，池子只能放 "
                              "{pool} token。",
        "already_mha": "该模型本来就是每个 Q head 一个 KV head（MHA）。",
    },
}

NOTES = {
    "en": {
        "layers_full": "KV: all {layers} layers are full attention; a request's KV grows with every token.",
        "layers_hybrid": "KV: {full} full-attention and {sliding} sliding-window layers (window {window:,} "
                         "tokens); in a sliding layer a request holds at most {cap_blocks} blocks "
                         "({cap_tokens:,} tokens) at decode.",
        "layers_all_sliding": "KV: all {sliding} layers are sliding-window (window {window:,} tokens): a "
                              "request holds at most {cap_blocks} blocks ({cap_tokens:,} tokens) per layer, "
                              "however long it is.",
        "cross_layers": "{cross} cross-attention layers (indices {indices}) hold no KV per text token.",
        "groups": "vLLM forms {groups} KV groups of {size} layers that share one pool; a pool block is "
                  "{block} tokens × {size} layers = {block_bytes:,} B.",
        "padding": "vLLM pads {padding} empty layer slots so that every group has {size}; they take "
                   "pool memory too.",
        "mla": "MLA: one latent of {rank} + {rope} values per token per layer, the same on every TP rank.",
        "sinks": "gpt-oss's attention sinks are learned per-head logits: they store no KV.",
        "dtype_config": "Weights, activations and KV (auto) in {served}, the config's dtype.",
        "dtype_downcast": "The config says {config}; vLLM's --dtype auto serves float32 checkpoints "
                          "in 16-bit: {served}.",
        "dtype_missing": "The config has no torch_dtype; vLLM then reads float32 (or the checkpoint's "
                         "tensors) and serves {served}.",
        "dtype_requested": "Served in {served} as --dtype asks (config: {config}).",
        "kv_dtype": "KV cache elements of {kv_bytes} B (--kv-cache-dtype {kv_dtype}).",
        "default": "{field} = {value}: the {model_type} configuration class's default (the config omits it).",
        "tied": "Input embedding and LM head are tied: stored once, multiplied every token.",
        "moe": "Mixture of experts: {experts} routed experts, {top_k} per token, in {moe_layers} of "
               "{layers} layers{shared}: {total} parameters, {active} active per token.",
        "quant": "Weights quantized ({method}): {bpw:.4f} B per weight with scales, for {scope}; "
                 "the router, the embeddings and the LM head stay in {dtype}.",
        "quant_scope_experts": "the routed experts only",
        "quant_scope_linear": "attention, FFN and expert matrices",
        "tp_split": "TP {tp}: {per_gpu} KV heads per GPU.",
        "tp_replicated": "TP {tp}: {kv_heads} KV heads, each replicated on {replicas} GPUs (one per GPU).",
        "decode_reads": "A decode step of C={c} reads each layer's weights once, {touched:.1f} of {experts} "
                        "routed experts per MoE layer (uniform routing), and each request's KV over its "
                        "window.",
        "capacity_curve": "Capacity comes from the per-request KV curve at in + out = {context:,} tokens: "
                          "{blocks:,} pool blocks per request.",
        "nm_memory": "Activations, CUDA graphs and other non-KV memory are not subtracted from the GPU's "
                     "memory: vLLM's pool will be smaller than the ceiling shown.",
        "nm_norms": "Biases and norm weights are not counted (well under 0.1 % of the parameters).",
        "nm_prefill": "While a prompt is prefilled, vLLM reserves window − 1 + the tokens in flight in each "
                      "sliding layer for it; the capacity above is the decode-time holding.",
        "nm_encoder": "The image's KV in the cross-attention layers (per request, set by the image tiles) "
                      "is not counted: text-only requests.",
        "nm_vision": "The vision encoder's weights are not counted (text decoder only).",
        "nm_chunked": "Chunked local attention (attention_chunk_size {chunk:,}) is not modelled: those "
                      "layers are counted as full attention, which overstates their KV.",
        "nm_mtp": "The {n} multi-token-prediction layer(s) (num_nextn_predict_layers) load only with "
                  "speculative decoding: not counted.",
        "nm_quant": "Weights not computed: {reason}.",
        "nm_routing": "Expert load imbalance is not modelled: decode weight reads assume uniform routing.",
        "nm_prefix": "Prefix caching is not modelled: every request holds its whole context.",
        "nm_tp_weights": "Weights per GPU = total ÷ TP; replicated KV projections, router and norms add a "
                         "little.",
        "w_weights": "The weights need {weights} per GPU at TP {tp}, more than vLLM's budget of {budget} "
                     "({util:.0%} of the {gpu}'s {memory}).",
        "w_kv_budget": "The KV budget ({kv}) plus the weights ({weights}) exceed vLLM's budget of {budget} "
                       "per GPU ({util:.0%} of the {gpu}'s {memory}).",
        "w_kv_gpu": "The KV budget ({kv}) is more than the {gpu} has ({memory}).",
        "w_max_len": "in + out = {context:,} tokens is more than max_model_len {limit:,}: vLLM refuses "
                     "such requests.",
        "w_quant_tp": "{problem}.",
        "w_pool_tokens_hybrid": "For a model with {groups} KV groups, --kv-pool-tokens is read as tokens per "
                                "group (blocks × block ÷ groups); vLLM 0.32 logs maximum concurrency × "
                                "max_model_len instead. --kv-pool-blocks (num_gpu_blocks) is exact.",
        "w_no_gpu_memory": "The GPU table gives no memory for the {gpu}: the fit is not checked.",
    },
    "zh": {
        "layers_full": "KV：全部 {layers} 层都是全注意力；请求的 KV 随每个 token 增长。",
        "layers_hybrid": "KV：{full} 层全注意力、{sliding} 层滑动窗口（窗口 {window:,} token）；"
                         "解码时每个滑动窗口层里一条请求最多占 {cap_blocks} 块（{cap_tokens:,} token）。",
        "layers_all_sliding": "KV：全部 {sliding} 层都是滑动窗口（窗口 {window:,} token）："
                              "无论请求多长，每层最多占 {cap_blocks} 块（{cap_tokens:,} token）。",
        "cross_layers": "{cross} 层交叉注意力（第 {indices} 层）不为文本 token 存 KV。",
        "groups": "vLLM 把它们分成 {groups} 个 KV 组，每组 {size} 层，共用一个池；"
                  "一个池块 = {block} token × {size} 层 = {block_bytes:,} B。",
        "padding": "vLLM 补了 {padding} 个空层位，让每组都有 {size} 层；它们同样占池内存。",
        "mla": "MLA：每层每 token 一个 {rank} + {rope} 维的潜向量，每个 TP rank 都存完整一份。",
        "sinks": "gpt-oss 的 attention sink 是每个 head 学到的 logit，不占 KV。",
        "dtype_config": "权重、激活和 KV（auto）都用配置里的 {served}。",
        "dtype_downcast": "配置写的是 {config}；vLLM 的 --dtype auto 会把 float32 检查点用 16 位运行：{served}。",
        "dtype_missing": "配置没有 torch_dtype；vLLM 此时按 float32（或检查点张量的类型）读取，并以 {served} 运行。",
        "dtype_requested": "按 --dtype 以 {served} 运行（配置：{config}）。",
        "kv_dtype": "KV 缓存元素 {kv_bytes} B（--kv-cache-dtype {kv_dtype}）。",
        "default": "{field} = {value}：配置里没写，取 {model_type} 配置类的默认值。",
        "tied": "输入嵌入与 LM head 共享权重：只存一份，每个 token 都要乘一次。",
        "moe": "混合专家：{experts} 个路由专家，每 token 用 {top_k} 个，分布在 {layers} 层中的 "
               "{moe_layers} 层{shared}：共 {total} 参数，每 token 激活 {active}。",
        "quant": "权重已量化（{method}）：含缩放因子每个权重 {bpw:.4f} B，作用于{scope}；"
                 "路由器、嵌入和 LM head 仍为 {dtype}。",
        "quant_scope_experts": "路由专家",
        "quant_scope_linear": "注意力、FFN 和专家矩阵",
        "tp_split": "TP {tp}：每卡 {per_gpu} 个 KV head。",
        "tp_replicated": "TP {tp}：{kv_heads} 个 KV head，每个复制到 {replicas} 张卡上（每卡一个）。",
        "decode_reads": "C={c} 的一个 decode 步：每层权重读一次，每个 MoE 层读 {experts} 个路由专家中的 "
                        "{touched:.1f} 个（按均匀路由），以及每条请求窗口内的 KV。",
        "capacity_curve": "容量按单请求的 KV 曲线计算：输入 + 输出 = {context:,} token 时每条请求占 "
                          "{blocks:,} 个池块。",
        "nm_memory": "未从显存中扣除激活、CUDA graph 等非 KV 内存：vLLM 实际的池会小于这里的上限。",
        "nm_norms": "未计偏置和归一化权重（远低于参数量的 0.1 %）。",
        "nm_prefill": "prefill 期间，vLLM 为该请求在每个滑动窗口层预留“窗口 − 1 + 在途 token”；"
                      "上面的容量是解码阶段的占用。",
        "nm_encoder": "未计交叉注意力层里图像的 KV（每请求一份，取决于图像分块）：按纯文本请求计算。",
        "nm_vision": "未计视觉编码器的权重（只算文本解码器）。",
        "nm_chunked": "未建模分块局部注意力（attention_chunk_size {chunk:,}）：这些层按全注意力计，KV 偏大。",
        "nm_mtp": "{n} 个多 token 预测层（num_nextn_predict_layers）只在投机解码时加载：未计入。",
        "nm_quant": "未计算权重：{reason}。",
        "nm_routing": "未建模专家负载不均：decode 读取的权重按均匀路由估算。",
        "nm_prefix": "未建模前缀缓存：每条请求按完整上下文占用。",
        "nm_tp_weights": "每卡权重 = 总量 ÷ TP；被复制的 KV 投影、路由器和归一化权重会略多一点。",
        "w_weights": "TP {tp} 时每卡权重需要 {weights}，超过 vLLM 的可用显存 {budget}"
                     "（{gpu} 的 {memory} 的 {util:.0%}）。",
        "w_kv_budget": "KV 预算（{kv}）加上权重（{weights}）超过每卡可用显存 {budget}"
                       "（{gpu} 的 {memory} 的 {util:.0%}）。",
        "w_kv_gpu": "KV 预算（{kv}）超过了 {gpu} 的显存（{memory}）。",
        "w_max_len": "输入 + 输出 = {context:,} token，超过 max_model_len {limit:,}：vLLM 会拒绝这样的请求。",
        "w_quant_tp": "{problem}。",
        "w_pool_tokens_hybrid": "该模型有 {groups} 个 KV 组，--kv-pool-tokens 按“每组 token 数”"
                                "（块数 × 块大小 ÷ 组数）理解；vLLM 0.32 日志里的是“最大并发 × "
                                "max_model_len”。用 --kv-pool-blocks（num_gpu_blocks）才精确。",
        "w_no_gpu_memory": "GPU 表里没有 {gpu} 的显存：未检查能否放下。",
    },
}
