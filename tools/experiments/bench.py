"""Where the book's code stands against PyTorch's own, measured (issue: Part V).

    python tools/experiments/bench.py                # CPU, one thread (as the notebooks run)
    python tools/experiments/bench.py --device cuda  # a GPU, bf16 autocast for the training step
    python tools/experiments/bench.py --quick        # fewer repetitions, for a smoke run

Three tables, each the median of interleaved repetitions (ours and theirs alternate, so a
machine that slows down mid-run slows both):

1. training step (forward + backward + Adam) of `utils.model.Transformer` on its fast path
   against `nn.Transformer` with the same sizes, masks, embeddings and generator; the ratio
   is theirs / ours (> 1: ours is faster), measured in 3 fresh processes (see
   `step_in_fresh_process`), with the median and the range over them;
2. greedy decoding tokens/s with and without the key/value cache;
3. attention time and peak memory, naive (`utils.attention.scaled_dot_product_attention`)
   against fused (`F.scaled_dot_product_attention`), at a few lengths.

Not a test: timings depend on the machine. Notebook 14 discusses what the numbers mean.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch import nn

from utils.attention import scaled_dot_product_attention
from utils.decoding import translate
from utils.measure import interleaved, peak_cpu_bytes
from utils.model import Transformer, TransformerConfig
from utils.parity import torch_transformer


def training_step_ratio(
    d_model: int, n_layers: int, batch: int, length: int, device: torch.device, repeats: int
) -> tuple[float, float]:
    """Seconds per training step: (ours on the fast path, nn.Transformer)."""
    torch.manual_seed(0)
    n_heads = 4 if d_model <= 128 else 8
    vocab = 1000
    config = TransformerConfig(
        vocab,
        vocab,
        d_model=d_model,
        n_heads=n_heads,
        d_ff=4 * d_model,
        n_layers=n_layers,
        dropout=0.1,
        fused=True,
    )
    ours = Transformer(config).to(device)
    theirs = torch_transformer(config).to(device)
    if not config.norm_first:  # as utils.parity.copy_to_torch_transformer does
        theirs.encoder.norm = None
        theirs.decoder.norm = None
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab, (batch, length), generator=g)
    tgt = torch.randint(4, vocab, (batch, length), generator=g)
    src[: batch // 2, -length // 4 :] = 0  # some padding, as in real batches
    tgt[: batch // 2, -length // 8 :] = 0
    src, tgt = src.to(device), tgt.to(device)
    causal = nn.Transformer.generate_square_subsequent_mask(length, device=device, dtype=torch.bool)
    opt_ours = torch.optim.Adam(ours.parameters())
    # theirs trains its layers and our embeddings/generator, which it borrows
    opt_theirs = torch.optim.Adam([*theirs.parameters(), *ours.parameters()])
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def loss_of(logits: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1).float(), tgt.flatten(), ignore_index=0)

    def step_ours() -> None:
        opt_ours.zero_grad(set_to_none=True)
        with autocast:
            loss = loss_of(ours(src, tgt))
        loss.backward()
        opt_ours.step()

    def step_theirs() -> None:
        opt_theirs.zero_grad(set_to_none=True)
        with autocast:
            hidden = theirs(
                ours.src_embed(src),
                ours.tgt_embed(tgt),
                tgt_mask=causal,
                src_key_padding_mask=src == 0,
                tgt_key_padding_mask=tgt == 0,
                memory_key_padding_mask=src == 0,
                tgt_is_causal=True,
            )
            loss = loss_of(ours.generator(hidden))
        loss.backward()
        opt_theirs.step()

    t_ours, t_theirs = interleaved([step_ours, step_theirs], repeats, device)
    return t_ours, t_theirs


def decoding_speed(
    d_model: int, device: torch.device, repeats: int, batch: int = 32, new_tokens: int = 64
) -> tuple[float, float]:
    """Generated tokens per second of greedy decoding: (with cache, without)."""
    torch.manual_seed(0)
    config = TransformerConfig(
        1000,
        1000,
        d_model=d_model,
        n_heads=8 if d_model >= 256 else 4,
        d_ff=4 * d_model,
        n_layers=6 if d_model >= 256 else 2,
        dropout=0.0,
        eos_id=2,
    )
    model = Transformer(config).to(device).eval()
    src = torch.randint(4, 1000, (batch, 20), generator=torch.Generator().manual_seed(0))
    src = src.to(device)
    # the untrained model would stop at a random <eos>: decode a fixed number of tokens
    with torch.no_grad():
        model.generator.proj.bias[config.eos_id] = -1e4
    fns = [
        lambda: translate(model, src, max_len=new_tokens + 1, use_cache=True),
        lambda: translate(model, src, max_len=new_tokens + 1, use_cache=False),
    ]
    t_cached, t_full = interleaved(fns, repeats, device)
    return batch * new_tokens / t_cached, batch * new_tokens / t_full


def attention_cost(
    length: int, device: torch.device, repeats: int, d_head: int = 64, heads: int = 8
) -> tuple[float, float, float, float]:
    """(naive s, fused s, naive peak bytes, fused peak bytes) for one (1, h, n, d) attention."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, length, d_head, generator=g).to(device) for _ in range(3))

    def naive() -> None:
        scaled_dot_product_attention(q, k, v)

    def fused() -> None:
        F.scaled_dot_product_attention(q, k, v)

    times = interleaved([naive, fused], repeats, device)
    peaks = []
    for fn in (naive, fused):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            fn()
            peaks.append(torch.cuda.max_memory_allocated() - base)
        else:
            # torch's CPU allocator is not visible to tracemalloc; use the profiler instead
            with torch.profiler.profile(profile_memory=True) as prof:
                fn()
            peaks.append(peak_cpu_bytes(prof))
    return times[0], times[1], peaks[0], peaks[1]


def step_in_fresh_process(
    d_model: int, n_layers: int, device: torch.device, repeats: int
) -> tuple[float, float]:
    """`training_step_ratio` run by a new Python process: (ours s, theirs s).

    A process's history moves these timings by several percent (where earlier work left the
    heap, which buffers land on which cache sets), so each measurement starts from a fresh
    process, as benchmark runners such as pyperf do, and several are taken.
    """
    command = [
        sys.executable,
        __file__,
        "--device",
        str(device),
        "--one-step",
        f"{d_model},{n_layers},{repeats}",
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    t_ours, t_theirs = (float(x) for x in out.split()[-2:])
    return t_ours, t_theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument(
        "--sizes",
        nargs="+",
        metavar="D_MODEL,N",
        help="training-step sizes (default: 128,2 512,2, and 512,6 on cuda)",
    )
    parser.add_argument(
        "--tables", default="123", help="which tables to print, e.g. 1 for the training step only"
    )
    parser.add_argument("--one-step", help=argparse.SUPPRESS)  # d_model,N,repeats: internal
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)  # as the notebooks run (utils.setup)
    if args.one_step:
        d_model, n_layers, repeats = (int(x) for x in args.one_step.split(","))
        batch, length = (64, 64) if n_layers == 6 else (32, 64)
        t_ours, t_theirs = training_step_ratio(d_model, n_layers, batch, length, device, repeats)
        print(t_ours, t_theirs)
        return
    repeats = 4 if args.quick else 10  # even: each order equally often
    rounds = 1 if args.quick else 3
    print(f"device: {device}, torch {torch.__version__}, threads {torch.get_num_threads()}")

    if args.sizes:
        sizes = [(int(d), int(n)) for d, n in (size.split(",") for size in args.sizes)]
    else:
        sizes = [(128, 2), (512, 2)] + ([(512, 6)] if device.type == "cuda" else [])
    if "1" in args.tables:
        training_table(sizes, device, repeats, rounds)
    if "2" in args.tables:
        decoding_table(device, repeats)
    if "3" in args.tables:
        attention_table(device, repeats)


def training_table(
    sizes: list[tuple[int, int]], device: torch.device, repeats: int, rounds: int
) -> None:
    """Table 1: ours against nn.Transformer, each size in `rounds` fresh processes."""
    print("\n1. Training step (fwd + bwd + Adam), batch 32 x 64 tokens (64 x 64 at N = 6)")
    print(f"   {rounds} fresh process(es) x {repeats} interleaved repetitions each; ms and ratio:")
    print("   the median over processes, range: the lowest and highest process's ratio")
    print(
        f"{'d_model':>8} {'N':>3} {'ours ms':>9} {'nn.Transformer ms':>18} {'ratio':>7} "
        f"{'range':>12}"
    )
    for d_model, n_layers in sizes:
        runs = [step_in_fresh_process(d_model, n_layers, device, repeats) for _ in range(rounds)]
        ratios = [t_theirs / t_ours for t_ours, t_theirs in runs]
        t_ours = statistics.median(t for t, _ in runs)
        t_theirs = statistics.median(t for _, t in runs)
        print(
            f"{d_model:>8} {n_layers:>3} {t_ours * 1e3:>9.1f} {t_theirs * 1e3:>18.1f} "
            f"{statistics.median(ratios):>6.2f}x {min(ratios):>5.2f}-{max(ratios):.2f}x"
        )


def decoding_table(device: torch.device, repeats: int) -> None:
    """Table 2: greedy decoding with and without the key/value cache."""
    print("\n2. Greedy decoding, 32 sentences x 64 new tokens")
    print(f"{'d_model':>8} {'cached tok/s':>13} {'recompute tok/s':>16} {'speed-up':>9}")
    for d_model in (128, 512):
        cached, full = decoding_speed(d_model, device, max(1, repeats // 3))
        print(f"{d_model:>8} {cached:>13.0f} {full:>16.0f} {cached / full:>8.1f}x")


def attention_table(device: torch.device, repeats: int) -> None:
    """Table 3: naive against fused attention, time and peak CPU memory."""
    print("\n3. Attention (1 x 8 heads x n x 64), naive vs fused")
    print(f"{'n':>6} {'naive ms':>9} {'fused ms':>9} {'naive MiB':>10} {'fused MiB':>10}")
    for length in (256, 1024, 2048):
        tn, tf, mn, mf = attention_cost(length, device, repeats)
        mib = 2**20
        print(f"{length:>6} {tn * 1e3:>9.2f} {tf * 1e3:>9.2f} {mn / mib:>10.1f} {mf / mib:>10.1f}")


if __name__ == "__main__":
    main()
