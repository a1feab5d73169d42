"""Small transformer models exported by torch's dynamo exporter, cached for the fusion benchmarks.

    python benchmarks/transformer_exports.py            # export what is missing, print the paths
    python benchmarks/transformer_exports.py --force    # export again

Each model is built from a ``transformers`` config with random weights (seeded; every
parameter perturbed, so biases are not the init's zeros, which the exporter would drop), made small
(2 layers) so an export takes seconds, and exported with ``torch.onnx.export(..., dynamo=True)``
the way a user does: the sequence length dynamic for the text models, no KV cache. The files go
to ``~/.cache/fusionviz/transformers/<name>.onnx`` (``$FUSIONVIZ_CACHE`` overrides the root).
torch and transformers are development tools here: :func:`available` says whether they are
installed, and the benchmarks skip these models without them.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

#: the exports, in the order the benchmarks print them
NAMES = ("gpt2", "vit", "bert", "llama", "qwen2")


def cache_dir() -> Path:
    root = os.environ.get("FUSIONVIZ_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "fusionviz"
    return base / "transformers"


def available() -> str | None:
    """None when torch and transformers can be imported, else why not."""
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    return f"{' and '.join(missing)} not installed" if missing else None


def _build(name: str):
    """(model, example inputs, input names, output names, dynamic shapes) for ``name``."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    seq = torch.export.Dim("seq", max=512)
    ids = torch.randint(0, 1000, (1, 32))
    if name == "gpt2":
        cfg = tf.GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=1000, n_positions=512)
        model = tf.GPT2LMHeadModel(cfg)
        return model, (ids,), ["input_ids"], ["logits"], ({1: seq},)
    if name == "bert":
        cfg = tf.BertConfig(num_hidden_layers=2, hidden_size=256, num_attention_heads=4, intermediate_size=1024,
                            vocab_size=1000, max_position_embeddings=512)
        model = tf.BertModel(cfg, add_pooling_layer=False)
        mask = torch.ones(1, 32, dtype=torch.int64)
        return (model, (ids, mask), ["input_ids", "attention_mask"], ["last_hidden_state"],
                ({1: seq}, {1: seq}))
    if name == "vit":
        cfg = tf.ViTConfig(num_hidden_layers=2, hidden_size=256, num_attention_heads=4, intermediate_size=1024,
                           image_size=224, patch_size=16)
        model = tf.ViTModel(cfg, add_pooling_layer=False)
        pixels = torch.randn(1, 3, 224, 224)
        return model, (pixels,), ["pixel_values"], ["last_hidden_state"], None
    if name in ("llama", "qwen2"):
        common = {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 512}
        if name == "llama":
            model = tf.LlamaForCausalLM(tf.LlamaConfig(**common))
        else:
            model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**common))
        model.config.use_cache = False
        return model, (ids,), ["input_ids"], ["logits"], ({1: seq},)
    raise ValueError(f"unknown export {name!r}; known: {', '.join(NAMES)}")


def export(name: str, force: bool = False) -> Path:
    """The cached export of ``name``, exported first when missing (or ``force``)."""
    path = cache_dir() / f"{name}.onnx"
    if path.exists() and not force:
        return path
    import torch

    model, args, in_names, out_names, dyn = _build(name)
    model.eval()
    with torch.no_grad():  # biases and norm scales as trained models have them, not the init's 0 / 1
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.onnx")
    with torch.no_grad():
        torch.onnx.export(model, args, str(tmp), dynamo=True, input_names=in_names, output_names=out_names,
                          dynamic_shapes=dyn, external_data=False)
    tmp.replace(path)
    return path


def export_all(names=NAMES, force: bool = False) -> dict[str, Path]:
    return {n: export(n, force) for n in names}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=list(NAMES), help=f"which ({', '.join(NAMES)})")
    ap.add_argument("--force", action="store_true", help="export again even when cached")
    args = ap.parse_args(argv)
    why = available()
    if why is not None:
        print(f"cannot export: {why}", file=sys.stderr)
        return 2
    for n in args.names:
        t = time.perf_counter()
        p = export(n, args.force)
        print(f"{n:<8} {p}  ({time.perf_counter() - t:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
