#!/usr/bin/env python3
"""Plain-PyTorch baseline for `kdtrain bench`: the same student (HF-LLaMA/Qwen2
shaped: RMSNorm, rotate_half RoPE with llama3 scaling, GQA, SwiGLU, tied or
untied head) with each attention variant written as a strong PyTorch user
writes it (scripts/peers/torch_attention.py: SDPA flash for baseline and gated,
FlexAttention with the sink through the log-sum-exp for sink, SDPA plus a
cumulative sum for affine), trained one micro-batch per step with bf16 autocast
(cuda), AdamW (fused on cuda), an optional teacher forward under no_grad, and KD
(forward KL) + CE computed in token chunks under activation checkpointing, so
the (B*T, V) logits never all live at once.

FLOPs per token use kdtrain's convention (src/bench/bench.h, docs/performance.md):
  N = trainable params except the input embedding, plus the LM head V*C once
  student 6*N + 12*L*H*D*T (full T, no causal halving); teacher 2*N_t + 4*L_t*H_t*D_t*T

  python3 scripts/peers/bench_pytorch.py --preset llama3.2-1b --attention gated \
      --micro-batch 8 --seq-len 2048 --compile --device cuda --json
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch_attention
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # scripts/, for kdtrain_hf
from kdtrain_hf.variants import features  # noqa: E402

# Architectures of kdtrain's presets (src/config/presets.cpp); a test compares
# them with `kdtrain info --json`.
_LLAMA3 = dict(family="llama", vocab_size=128256, rms_norm_eps=1e-5, rope_theta=500000.0,
               rope_type="llama3", low_freq_factor=1.0, high_freq_factor=4.0,
               original_max_position_embeddings=8192, attention_bias=False,
               tie_word_embeddings=True)
_QWEN15 = dict(family="qwen2", vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1000000.0,
               rope_type="default", attention_bias=True)
PRESETS = {
    "qwen1.5-0.5b": dict(_QWEN15, hidden_size=1024, intermediate_size=2816, num_hidden_layers=24,
                         num_attention_heads=16, num_key_value_heads=16, head_dim=64,
                         tie_word_embeddings=True),
    "qwen1.5-1.8b": dict(_QWEN15, hidden_size=2048, intermediate_size=5504, num_hidden_layers=24,
                         num_attention_heads=16, num_key_value_heads=16, head_dim=128,
                         tie_word_embeddings=False),
    "llama3.2-1b": dict(_LLAMA3, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                        rope_factor=32.0),
    "llama3.2-3b": dict(_LLAMA3, hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                        num_attention_heads=24, num_key_value_heads=8, head_dim=128,
                        rope_factor=32.0),
    "llama3.1-8b": dict(_LLAMA3, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                        rope_factor=8.0, tie_word_embeddings=False),
    "tiny-llama": dict(_LLAMA3, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256,
                       rope_theta=10000.0, rope_factor=4.0, original_max_position_embeddings=64),
    "tiny-qwen": dict(_QWEN15, hidden_size=48, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=3, num_key_value_heads=3, head_dim=16, vocab_size=256,
                      tie_word_embeddings=False),
}
VARIANTS = torch_attention.VARIANTS
FLOP_FORMULA = ("student 6*N + 12*L*H*D*T (full T, no causal halving); teacher 2*N_t + "
                "4*L_t*H_t*D_t*T; N = trainable params except the input embedding, plus the LM "
                "head V*C once")


def flop_params(cfg, variant):
    """Parameters in the 6N term, from the shapes alone (matches the module below)."""
    C, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    H, Hkv, D, V = (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                    cfg["vocab_size"])
    layer = C * (H + 2 * Hkv) * D + H * D * C + 3 * C * F + 2 * C
    if cfg["attention_bias"]:
        layer += (H + 2 * Hkv) * D
    f = features(variant)
    layer += H * f.sink + C * H * f.affine + C * H * D * f.gate
    return L * layer + C + V * C  # + final norm + head (once, tied or not)


def attention_coefficient(cfg, T):
    return cfg["num_hidden_layers"] * cfg["num_attention_heads"] * cfg["head_dim"] * T


def student_train_flops_per_token(cfg, variant, T):
    return 6 * flop_params(cfg, variant) + 12 * attention_coefficient(cfg, T)


def teacher_forward_flops_per_token(cfg, T):
    return 2 * flop_params(cfg, "baseline") + 4 * attention_coefficient(cfg, T)


def build(torch, cfg, variant, device):
    """The decoder as an nn.Module on `device`; imported lazily so the FLOP helpers need
    no torch. Its attention core is torch_attention.Attention (the strong-user form of
    each variant), its RoPE the reference model's; call model.prepare(T) before the
    first forward."""
    import reference_model as ref

    nn = torch.nn
    F_ = torch.nn.functional
    C, Fd, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    H, Hkv, D, V = (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                    cfg["vocab_size"])
    f = features(variant)
    core = torch_attention.Attention(torch, variant, H, Hkv, D, device)

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(C))

        def forward(self, x):
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + cfg["rms_norm_eps"])
            return (y * self.weight).to(x.dtype)

    def inv_freq():
        scaling = None
        if cfg.get("rope_type") == "llama3":
            scaling = {"rope_type": "llama3", "factor": cfg["rope_factor"],
                       "low_freq_factor": cfg["low_freq_factor"], "high_freq_factor": cfg["high_freq_factor"],
                       "original_max_position_embeddings": cfg["original_max_position_embeddings"]}
        return ref.rope_inv_freq(ref.RefConfig(
            hidden_size=C, intermediate_size=Fd, num_hidden_layers=L, num_attention_heads=H,
            num_key_value_heads=Hkv, head_dim=D, vocab_size=V, rope_theta=cfg["rope_theta"],
            rope_scaling=scaling)).float()

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_norm = RMSNorm()
            self.qkv = nn.Linear(C, (H + 2 * Hkv) * D, bias=cfg["attention_bias"])
            self.o = nn.Linear(H * D, C, bias=False)
            if f.sink:
                self.sinks = nn.Parameter(torch.randn(H) * 0.02)
            if f.affine:
                self.alpha_proj = nn.Linear(C, H, bias=False)
                self.register_buffer("alpha_ma", torch.zeros(H))
            if f.gate:
                self.gate_proj = nn.Linear(C, H * D, bias=False)
            self.post_norm = RMSNorm()
            self.gate_up = nn.Linear(C, 2 * Fd, bias=False)
            self.down = nn.Linear(Fd, C, bias=False)

        def attend(self, x, q, k, v):
            B, T = q.shape[0], q.shape[2]
            alpha = torch_attention.linear_clip(self.alpha_proj(x).float()) if f.affine else None
            o = core(q, k, v, sinks=getattr(self, "sinks", None), alpha=alpha,
                     alpha_ma=getattr(self, "alpha_ma", None))
            return o.reshape(B, T, H * D)

        def forward(self, h, cos, sin):
            B, T, _ = h.shape
            x = self.input_norm(h)
            qkv = self.qkv(x).view(B, T, H + 2 * Hkv, D).transpose(1, 2)
            q, k, v = qkv.split((H, Hkv, Hkv), dim=1)
            q, k = ref.apply_rope(q, cos, sin), ref.apply_rope(k, cos, sin)
            o = self.attend(x, q.to(v.dtype), k.to(v.dtype), v)
            if f.gate:
                o = torch_attention.gate(torch, o, self.gate_proj(x))
            h = h + self.o(o)
            g, u = self.gate_up(self.post_norm(h)).chunk(2, dim=-1)
            return h + self.down(F_.silu(g) * u)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(V, C)
            self.layers = nn.ModuleList(Layer() for _ in range(L))
            self.norm = RMSNorm()
            self.lm_head = None if cfg["tie_word_embeddings"] else nn.Linear(C, V, bias=False)
            self.register_buffer("inv_freq", inv_freq(), persistent=False)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    torch.nn.init.normal_(p, std=0.02)
                elif name.endswith(".bias"):
                    torch.nn.init.zeros_(p)

        def prepare(self, T):  # outside any compiled region
            core.prepare(T)

        def formulation(self):
            return core.formulation()

        def head_weight(self):
            return self.embed.weight if self.lm_head is None else self.lm_head.weight

        def forward(self, tokens):  # final hidden (B, T, C)
            T = tokens.shape[1]
            pos = torch.arange(T, device=tokens.device, dtype=torch.float32)
            ang = torch.outer(pos, self.inv_freq)
            ang = torch.cat((ang, ang), dim=-1)
            cos, sin = ang.cos().view(1, 1, T, D), ang.sin().view(1, 1, T, D)
            h = self.embed(tokens)
            for layer in self.layers:
                h = layer(h, cos, sin)
            return self.norm(h)

    return Decoder()


def chunked_loss(torch, hidden, head, targets, t_hidden, t_head, kd_weight, chunk):
    """Mean of kd_weight*KL(teacher||student) + (1-kd_weight)*CE over tokens, one
    checkpointed chunk at a time so only one chunk of logits is held."""
    from torch.utils.checkpoint import checkpoint
    F_ = torch.nn.functional
    h = hidden.reshape(-1, hidden.shape[-1])
    y = targets.reshape(-1)
    th = None if t_hidden is None else t_hidden.reshape(-1, t_hidden.shape[-1])
    n = h.shape[0]

    def piece(hc, yc, tc):
        logits = (hc @ head.t()).float()
        logp = F_.log_softmax(logits, dim=-1)
        ce = F_.nll_loss(logp, yc, reduction="sum")
        if tc is None:
            return ce
        with torch.no_grad():
            tlogp = F_.log_softmax((tc @ t_head.t()).float(), dim=-1)
        kd = (tlogp.exp() * (tlogp - logp)).sum()
        return kd_weight * kd + (1 - kd_weight) * ce

    total = 0.0
    for s in range(0, n, chunk):
        tc = None if th is None else th[s:s + chunk]
        total = total + checkpoint(piece, h[s:s + chunk], y[s:s + chunk], tc, use_reentrant=False)
    return total / n


def run(args):
    import torch
    cfg = PRESETS[args.preset]
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    amp = device.type == "cuda" if args.dtype == "auto" else args.dtype == "bf16"
    # Built on the device itself: parameters are made and initialised there, not on the
    # host and copied (a 1B model takes seconds on the CPU, a 3B teacher much longer).
    with device:
        student = build(torch, cfg, args.attention, device)
    student.prepare(args.seq_len)
    teacher = None
    if args.teacher:
        tcfg = PRESETS[args.teacher]
        if tcfg["vocab_size"] != cfg["vocab_size"]:
            sys.exit(f"--teacher {args.teacher}: vocab {tcfg['vocab_size']} != student {cfg['vocab_size']}")
        with device:
            teacher = build(torch, tcfg, "baseline", device).eval()
        teacher.prepare(args.seq_len)
        for p in teacher.parameters():
            p.requires_grad_(False)
        if amp:
            teacher = teacher.to(torch.bfloat16)
    decay = [p for p in student.parameters() if p.dim() == 2]
    no_decay = [p for p in student.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if device.type == "cuda" else {}))
    s_fwd, t_fwd = student, teacher
    if args.compile:
        s_fwd = torch.compile(student)
        t_fwd = torch.compile(teacher) if teacher is not None else None

    g = torch.Generator().manual_seed(args.seed)
    B, T = args.micro_batch, args.seq_len
    row = torch.randint(0, cfg["vocab_size"], (B, T + 1), generator=g)
    tokens, targets = row[:, :T].to(device), row[:, 1:].to(device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp)

    steps_ms, teacher_ms, last = [], [], float("nan")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i in range(args.warmup + args.steps):
        sync()
        a = time.perf_counter()
        t_hidden = None
        if t_fwd is not None:
            with torch.no_grad(), autocast():
                t_hidden = t_fwd(tokens)
        sync()
        b = time.perf_counter()
        with autocast():
            hidden = s_fwd(tokens)
            loss = chunked_loss(torch, hidden, student.head_weight(), targets, t_hidden,
                                None if teacher is None else teacher.head_weight(),
                                1.0 if teacher is not None else 0.0, args.chunk_tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        c = time.perf_counter()
        last = float(loss.detach())
        if i >= args.warmup:
            steps_ms.append((c - a) * 1e3)
            teacher_ms.append((b - a) * 1e3)

    step_ms = statistics.median(steps_ms)
    tok_s = B * T / (step_ms / 1e3)
    sf = student_train_flops_per_token(cfg, args.attention, T)
    tf = teacher_forward_flops_per_token(PRESETS[args.teacher], T) if args.teacher else 0
    peak = args.peak_tflops or (989.0 if device.type == "cuda" else 0.0)
    achieved = (sf + tf) * tok_s / 1e12
    counted = sum(p.numel() for p in student.parameters()) - student.embed.weight.numel() + \
        cfg["vocab_size"] * cfg["hidden_size"] * (1 if cfg["tie_word_embeddings"] else 0)
    assert counted == flop_params(cfg, args.attention), (counted, flop_params(cfg, args.attention))
    return {
        "tool": "bench_pytorch", "torch": torch.__version__, "preset": args.preset,
        "attention": args.attention, "attention_formulation": student.formulation(),
        "device": device.type, "dtype": "bf16-autocast" if amp else "fp32",
        "compile": args.compile, "micro_batch": B, "seq_len": T, "tokens_per_step": B * T,
        "warmup": args.warmup, "steps": args.steps, "teacher": args.teacher,
        "params_flop": flop_params(cfg, args.attention),
        "teacher_params_flop": flop_params(PRESETS[args.teacher], "baseline") if args.teacher else 0,
        "flops_per_token": {"student_train": sf, "teacher_forward": tf, "total": sf + tf},
        "flop_formula": FLOP_FORMULA,
        "step_ms": step_ms, "phase_ms": {"teacher_forward": statistics.median(teacher_ms)},
        "tokens_per_s": tok_s, "achieved_tflops": achieved,
        "peak_tflops": peak or None, "mfu": achieved / peak if peak else None,
        "final_loss": last,
        "peak_device_bytes": torch.cuda.max_memory_allocated() if device.type == "cuda" else None,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--attention", default="baseline", choices=VARIANTS)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--teacher", default="", help="teacher preset (random init), forward only")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--compile", action="store_true", help="torch.compile student and teacher")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="auto", choices=("auto", "bf16", "fp32"),
                    help="auto: bf16 autocast on cuda, fp32 on cpu")
    ap.add_argument("--chunk-tokens", type=int, default=1024, help="tokens per loss chunk")
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="peak for MFU (default 989 on cuda: H100/H200 dense bf16; none on cpu)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.teacher and args.teacher not in PRESETS:
        ap.error(f"--teacher: unknown preset {args.teacher}")
    try:
        r = run(args)
    except RuntimeError as e:  # torch.OutOfMemoryError is a RuntimeError
        if "out of memory" not in str(e).lower():
            raise
        # e.g. a teacher too large for the device next to the student
        print(json.dumps({"tool": "bench_pytorch", "preset": args.preset, "attention": args.attention,
                          "micro_batch": args.micro_batch, "seq_len": args.seq_len,
                          "compile": args.compile, "error": "out of memory: " + str(e)[:300]}))
        sys.exit(3)
    if args.json:
        print(json.dumps(r))
    else:
        print(f"bench_pytorch: {r['preset']} {r['attention']} on {r['device']} ({r['dtype']}"
              f"{', compiled' if r['compile'] else ''}), B={r['micro_batch']} T={r['seq_len']}")
        print(f"  step {r['step_ms']:.3f} ms  tokens/s {r['tokens_per_s']:.1f}  "
              f"teacher fwd {r['phase_ms']['teacher_forward']:.3f} ms")
        mfu = "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.2f}%"
        print(f"  FLOPs/token {r['flops_per_token']['total']:.4g}  achieved "
              f"{r['achieved_tflops']:.4f} TFLOP/s  MFU {mfu}")
        print(f"  formula: {r['flop_formula']}")


if __name__ == "__main__":
    main()
