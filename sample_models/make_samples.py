"""Regenerate every sample model in ``sample_models/`` deterministically.

Run with ``make samples`` (installs ``torch==2.13.0`` CPU first) or directly::

    .venv/bin/python sample_models/make_samples.py [--only resnet_ts,textbook] [--no-check]

PyTorch is a dev-only tool here: fusionviz never imports it.  Every model is built from a
fixed seed, put in eval mode, exported, embedded into a single ``.onnx`` file (no external
data), then checked: ``onnx.checker``, onnxruntime (graph optimizations disabled) against the
torch eval output, and the structural promises the gallery makes (BatchNorm kept, CastLike
bias blocks in the dynamo export, Softmax/Erf in BERT, ...).  ``samples.json`` is written from
``SAMPLES`` below.

Export flags (also in README.md):

* TorchScript exporter: ``torch.onnx.export(model, args, path, dynamo=False,
  training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False, opset_version=17)``.
  With the model in eval mode PRESERVE exports BatchNormalization in inference form
  (one output, ``training_mode`` 0) and keeps it in the graph.
* dynamo exporter: ``torch.onnx.export(model, args, dynamo=True, optimize=False,
  opset_version=18)``; the returned ``ONNXProgram.model_proto`` is saved with weights embedded.
  Opset 18 (the exporter's lowest) keeps GELU as an Erf formula instead of opset-20 ``Gelu``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

logger = logging.getLogger("make_samples")

HERE = Path(__file__).resolve().parent
SEED = 20240601
TS_OPSET = 17
DYNAMO_OPSET = 18
RESNET_SHAPE = (1, 3, 224, 224)
MOBILENET_SHAPE = (1, 3, 112, 112)
EFFICIENTNET_SHAPE = (1, 3, 224, 224)
BERT_VOCAB = 1000
BERT_MAX_POS = 128


@dataclass(frozen=True)
class SampleSpec:
    """One gallery entry; ``samples.json`` is written from these."""

    name: str
    title: str
    description: str
    shows: tuple[str, ...]
    made_with: str
    must_have: tuple[str, ...] = field(default=())


SAMPLES: tuple[SampleSpec, ...] = (
    SampleSpec(
        "resnet_ts",
        "ResNet-18-style CNN (TorchScript export)",
        "Narrow ResNet-18 (widths 16/32/64/128, 224x224 input) with every BatchNorm kept: "
        "Conv+BN folding, Conv+Relu fusion, residual Add.",
        ("fold_batchnorm", "conv_bias_add", "conv_activation", "operation_fusion", "layout_nchwc",
         "memory_plan"),
        "torch.onnx.export(dynamo=False, training=PRESERVE, do_constant_folding=False, opset 17)",
        ("BatchNormalization", "Conv", "Relu", "Add", "MaxPool", "GlobalAveragePool", "Gemm"),
    ),
    SampleSpec(
        "resnet_dynamo",
        "Same ResNet (dynamo export, optimize=False)",
        "The same network and weights from the dynamo exporter without its optimizer: "
        "CastLike/Expand bias blocks hide the BatchNorm folding from simple pattern matchers.",
        ("fold_batchnorm", "fold_constants", "cast_elimination", "operation_fusion",
         "exporter_differences"),
        "torch.onnx.export(dynamo=True, optimize=False, opset 18), weights embedded",
        ("BatchNormalization", "Conv", "CastLike"),
    ),
    SampleSpec(
        "bert_ts",
        "BERT-style encoder (TorchScript export)",
        "3-layer BERT encoder (hidden 128, 4 heads) with eager attention written out, "
        "LayerNorm and erf-GELU; dynamic batch and seq.",
        ("fuse_attention", "gelu_fusion", "layernorm_fusion", "fuse_matmul_add",
         "fold_constants", "shape_simplification", "dynamic_shapes"),
        "torch.onnx.export(dynamo=False, do_constant_folding=False, opset 17, dynamic_axes batch/seq)",
        ("Softmax", "Erf", "MatMul", "LayerNormalization", "Gather", "Transpose"),
    ),
    SampleSpec(
        "bert_dynamo",
        "BERT-style encoder (dynamo export, optimize=False)",
        "The same encoder and weights from the dynamo exporter without its optimizer: "
        "symbolic-shape arithmetic and CastLike nodes around attention.",
        ("fuse_attention", "gelu_fusion", "layernorm_fusion", "fold_constants",
         "cast_elimination", "exporter_differences", "dynamic_shapes"),
        "torch.onnx.export(dynamo=True, optimize=False, opset 18, dynamic_shapes batch/seq)",
        ("Softmax", "Erf", "MatMul", "LayerNormalization"),
    ),
    SampleSpec(
        "mobilenet",
        "MobileNetV3-style CNN (TorchScript export)",
        "Depthwise convolutions, HardSwish, squeeze-excite (global pool, 1x1 convs, HardSigmoid) "
        "and BatchNorm kept: fusion and in-place friendly.",
        ("fold_batchnorm", "conv_activation", "depthwise_conv", "squeeze_excite", "memory_plan",
         "in_place"),
        "torch.onnx.export(dynamo=False, training=PRESERVE, do_constant_folding=False, opset 17)",
        ("BatchNormalization", "HardSwish", "HardSigmoid", "GlobalAveragePool", "Conv", "Mul"),
    ),
    SampleSpec(
        "efficientnet",
        "EfficientNet-B0-style CNN (TorchScript export)",
        "EfficientNet-B0 scaled to half width: MBConv blocks with depthwise 3x3/5x5 convs, SiLU "
        "(Sigmoid * x), squeeze-excite and BatchNorm kept: fusion and in-place friendly.",
        ("fold_batchnorm", "conv_activation", "depthwise_conv", "squeeze_excite", "swish",
         "memory_plan", "in_place"),
        "torch.onnx.export(dynamo=False, training=PRESERVE, do_constant_folding=False, opset 17)",
        ("BatchNormalization", "Conv", "Sigmoid", "Mul", "GlobalAveragePool", "Add", "Gemm"),
    ),
    SampleSpec(
        "textbook",
        "Textbook: every simplification in small form",
        "Hand-built graph with Identity, Dropout, Pad->Conv, Transpose pair, dead branch, "
        "constant subgraph, duplicate subexpression, MatMul+Add, x*1, x+0, no-op Cast, Conv+BN+Relu.",
        ("eliminate_identity", "eliminate_dropout", "fold_pad_into_conv",
         "transpose_elimination", "eliminate_dead_code", "fold_constants",
         "common_subexpression_elimination", "fuse_matmul_add", "noop_arithmetic",
         "cast_elimination", "fold_batchnorm", "conv_activation"),
        "onnx.helper, opset 17 (hand-built)",
        ("Identity", "Dropout", "Pad", "Transpose", "Cast", "Conv", "BatchNormalization", "Relu",
         "MatMul", "Add", "Mul", "Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "Exp"),
    ),
)


# --------------------------------------------------------------------------------------------
# torch models (imported lazily so the textbook model needs no torch)
# --------------------------------------------------------------------------------------------


def _torch():
    import torch

    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    return torch


def _randomize_batchnorm(model, gen) -> None:
    """Give every BatchNorm non-trivial statistics so folding changes the numbers."""
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            c = m.num_features
            with torch.no_grad():
                m.weight.copy_(torch.rand(c, generator=gen) * 1.0 + 0.5)          # gamma in [0.5, 1.5)
                m.bias.copy_(torch.rand(c, generator=gen) * 0.4 - 0.2)            # beta in [-0.2, 0.2)
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.3)
                m.running_var.copy_(torch.rand(c, generator=gen) * 1.5 + 0.5)     # var in [0.5, 2.0)


def build_resnet():
    """A ResNet-18-shaped network: stem, 4 stages of 2 BasicBlocks, widths 16/32/64/128.

    A quarter of ResNet-18's widths keeps the file under 3 MB; at 224x224 it costs about as
    many FLOPs per image as a full-width ResNet-18 at 112x112.
    """
    torch = _torch()
    nn = torch.nn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class ResNet(nn.Module):
        def __init__(self, widths=(16, 32, 64, 128), blocks=(2, 2, 2, 2), classes: int = 100) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(widths[0])
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            layers, cin = [], widths[0]
            for i, (w, n) in enumerate(zip(widths, blocks, strict=True)):
                stage = [BasicBlock(cin, w, 1 if i == 0 else 2)]
                stage += [BasicBlock(w, w, 1) for _ in range(n - 1)]
                layers.append(nn.Sequential(*stage))
                cin = w
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, classes)

        def forward(self, input):  # noqa: A002 - the ONNX input is called "input"
            x = self.maxpool(self.relu(self.bn1(self.conv1(input))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    model = ResNet()
    gen = torch.Generator().manual_seed(SEED + 1)
    _randomize_batchnorm(model, gen)
    return model.eval()


def build_mobilenet():
    """A MobileNetV3-small-style network: depthwise convs, HardSwish, squeeze-excite, BN."""
    torch = _torch()
    nn = torch.nn

    def make_divisible(v: float, d: int = 8) -> int:
        return max(d, int(v + d / 2) // d * d)

    class SqueezeExcite(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            mid = make_divisible(c // 4)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(c, mid, 1)
            self.relu = nn.ReLU(inplace=True)
            self.fc2 = nn.Conv2d(mid, c, 1)
            self.gate = nn.Hardsigmoid()

        def forward(self, x):
            return x * self.gate(self.fc2(self.relu(self.fc1(self.pool(x)))))

    def conv_bn_act(cin: int, cout: int, k: int, s: int, groups: int, act: type | None):
        mods = [nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False),
                nn.BatchNorm2d(cout)]
        if act is not None:
            mods.append(act())
        return nn.Sequential(*mods)

    class InvertedResidual(nn.Module):
        def __init__(self, cin, k, exp, cout, se, act, s) -> None:
            super().__init__()
            self.use_res = s == 1 and cin == cout
            layers = []
            if exp != cin:
                layers.append(conv_bn_act(cin, exp, 1, 1, 1, act))
            layers.append(conv_bn_act(exp, exp, k, s, exp, act))
            if se:
                layers.append(SqueezeExcite(exp))
            layers.append(conv_bn_act(exp, cout, 1, 1, 1, None))
            self.block = nn.Sequential(*layers)

        def forward(self, x):
            y = self.block(x)
            return x + y if self.use_res else y

    hs, re_ = nn.Hardswish, nn.ReLU
    # (kernel, expansion, out, SE, activation, stride) as in MobileNetV3-Small
    config = [
        (3, 16, 16, True, re_, 2), (3, 72, 24, False, re_, 2), (3, 88, 24, False, re_, 1),
        (5, 96, 40, True, hs, 2), (5, 240, 40, True, hs, 1), (5, 240, 40, True, hs, 1),
        (5, 120, 48, True, hs, 1), (5, 144, 48, True, hs, 1), (5, 288, 96, True, hs, 2),
        (5, 576, 96, True, hs, 1), (5, 576, 96, True, hs, 1),
    ]

    class MobileNetV3(nn.Module):
        def __init__(self, classes: int = 100) -> None:
            super().__init__()
            layers = [conv_bn_act(3, 16, 3, 2, 1, hs)]
            cin = 16
            for k, exp, cout, se, act, s in config:
                layers.append(InvertedResidual(cin, k, exp, cout, se, act, s))
                cin = cout
            layers.append(conv_bn_act(cin, 576, 1, 1, 1, hs))
            self.features = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Linear(576, 256), nn.Hardswish(), nn.Dropout(0.2),
                                            nn.Linear(256, classes))

        def forward(self, input):  # noqa: A002
            return self.classifier(torch.flatten(self.pool(self.features(input)), 1))

    model = MobileNetV3()
    gen = torch.Generator().manual_seed(SEED + 2)
    _randomize_batchnorm(model, gen)
    return model.eval()


def build_efficientnet(width: float = 0.5):
    """EfficientNet-B0's layout at ``width`` × its channels: MBConv (1×1 expand → depthwise k×k →
    squeeze-excite → 1×1 project, residual when the shape allows), SiLU, BN kept."""
    torch = _torch()
    nn = torch.nn

    def ch(c: int) -> int:
        return max(8, int(c * width + 4) // 8 * 8)

    def conv_bn(cin: int, cout: int, k: int, s: int, groups: int = 1, act: bool = True):
        mods = [nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        if act:
            mods.append(nn.SiLU())
        return nn.Sequential(*mods)

    class SqueezeExcite(nn.Module):
        def __init__(self, c: int, squeezed: int) -> None:
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.reduce = nn.Conv2d(c, squeezed, 1)
            self.act = nn.SiLU()
            self.expand = nn.Conv2d(squeezed, c, 1)
            self.gate = nn.Sigmoid()

        def forward(self, x):
            return x * self.gate(self.expand(self.act(self.reduce(self.pool(x)))))

    class MBConv(nn.Module):
        def __init__(self, cin: int, cout: int, k: int, s: int, expand: int) -> None:
            super().__init__()
            mid = cin * expand
            layers = [conv_bn(cin, mid, 1, 1)] if expand != 1 else []
            layers += [conv_bn(mid, mid, k, s, groups=mid), SqueezeExcite(mid, max(1, cin // 4)),
                       conv_bn(mid, cout, 1, 1, act=False)]
            self.block = nn.Sequential(*layers)
            self.residual = s == 1 and cin == cout

        def forward(self, x):
            y = self.block(x)
            return x + y if self.residual else y

    # EfficientNet-B0: (expand, kernel, stride, out channels, repeats)
    stages = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
              (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]

    class EfficientNet(nn.Module):
        def __init__(self, classes: int = 100) -> None:
            super().__init__()
            layers = [conv_bn(3, ch(32), 3, 2)]
            cin = ch(32)
            for expand, k, s, cout, repeats in stages:
                for i in range(repeats):
                    layers.append(MBConv(cin, ch(cout), k, s if i == 0 else 1, expand))
                    cin = ch(cout)
            layers.append(conv_bn(cin, ch(1280), 1, 1))
            self.features = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(ch(1280), classes))

        def forward(self, input):  # noqa: A002
            return self.classifier(torch.flatten(self.pool(self.features(input)), 1))

    model = EfficientNet()
    gen = torch.Generator().manual_seed(SEED + 3)
    _randomize_batchnorm(model, gen)
    return model.eval()


def build_bert(hidden: int = 128, layers: int = 3, heads: int = 4):
    """A BERT-style encoder with eager attention written out (no transformers package)."""
    torch = _torch()
    nn = torch.nn

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads, self.head_dim = heads, hidden // heads
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(hidden, hidden)
            self.value = nn.Linear(hidden, hidden)
            self.out = nn.Linear(hidden, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)

        def split(self, x):
            b, s, _ = x.shape
            return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

        def forward(self, x, mask_bias):
            q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
            probs = torch.softmax(scores + mask_bias, dim=-1)
            ctx = torch.matmul(probs, v).transpose(1, 2)
            b, s = ctx.shape[0], ctx.shape[1]
            ctx = ctx.reshape(b, s, hidden)
            return self.norm(self.out(ctx) + x)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = SelfAttention()
            self.intermediate = nn.Linear(hidden, 4 * hidden)
            self.gelu = nn.GELU()  # exact (erf) GELU
            self.output = nn.Linear(4 * hidden, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x, mask_bias):
            a = self.attention(x, mask_bias)
            return self.norm(self.output(self.gelu(self.intermediate(a))) + a)

    class Bert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word_embeddings = nn.Embedding(BERT_VOCAB, hidden)
            self.position_embeddings = nn.Embedding(BERT_MAX_POS, hidden)
            self.token_type_embeddings = nn.Embedding(2, hidden)
            self.emb_norm = nn.LayerNorm(hidden, eps=1e-12)
            self.register_buffer("position_ids", torch.arange(BERT_MAX_POS).unsqueeze(0), persistent=False)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))

        def forward(self, input_ids, attention_mask):
            seq = input_ids.shape[1]
            pos = self.position_ids[:, :seq]
            tok = torch.zeros_like(input_ids)
            x = self.word_embeddings(input_ids) + self.position_embeddings(pos) + self.token_type_embeddings(tok)
            x = self.emb_norm(x)
            mask_bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            for layer in self.layers:
                x = layer(x, mask_bias)
            return x

    model = Bert()
    gen = torch.Generator().manual_seed(SEED + 3)
    with torch.no_grad():  # non-trivial LayerNorm affine parameters
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(torch.rand(hidden, generator=gen) + 0.5)
                m.bias.copy_(torch.rand(hidden, generator=gen) * 0.2 - 0.1)
    return model.eval()


# --------------------------------------------------------------------------------------------
# export helpers
# --------------------------------------------------------------------------------------------


def export_torchscript(model, args: tuple, path: Path, *, input_names, output_names,
                       dynamic_axes=None) -> onnx.ModelProto:
    """TorchScript exporter, BatchNorm kept, no constant folding, opset 17."""
    import torch

    torch.onnx.export(
        model, args, str(path), dynamo=False,
        training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False,
        opset_version=TS_OPSET, input_names=list(input_names), output_names=list(output_names),
        dynamic_axes=dynamic_axes,
    )
    proto = onnx.load(str(path))
    return _finish(proto, path)


def export_dynamo(model, args: tuple, path: Path, *, input_names, output_names,
                  dynamic_shapes=None) -> onnx.ModelProto:
    """dynamo exporter with optimize=False; weights embedded in one file."""
    import torch

    program = torch.onnx.export(
        model, args, dynamo=True, optimize=False, opset_version=DYNAMO_OPSET,
        input_names=list(input_names), output_names=list(output_names),
        dynamic_shapes=dynamic_shapes,
    )
    proto = program.model_proto
    return _finish(proto, path)


_STRIP_META = ("pkg.torch.onnx.stack_trace",)


def _finish(proto: onnx.ModelProto, path: Path) -> onnx.ModelProto:
    """Drop source-path dependent metadata (stack traces) and save as one self-contained file."""
    for node in proto.graph.node:
        keep = [p for p in node.metadata_props if p.key not in _STRIP_META]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
        node.doc_string = ""
    proto.doc_string = ""
    for init in proto.graph.initializer:  # embed anything that came back as external data
        if init.data_location == TensorProto.EXTERNAL:
            raise RuntimeError(f"{path.name}: initializer {init.name} still uses external data")
    onnx.save(proto, str(path))
    for extra in path.parent.glob(path.name + ".data"):
        extra.unlink()
    return proto


# --------------------------------------------------------------------------------------------
# textbook model
# --------------------------------------------------------------------------------------------


def build_textbook(path: Path) -> onnx.ModelProto:
    """Hand-built graph with every simplification opportunity in small form.

    Data path (input [1,3,16,16] -> output [1,4]):
      1. Identity                                 -> eliminate_identity
      2. Cast to FLOAT of a FLOAT tensor            -> cast_elimination
      3. Pad (zeros, spatial only) -> Conv (pads 0) -> fold_pad_into_conv
      4. Conv -> BatchNormalization -> Relu          -> fold_batchnorm, conv_activation
      5. Dropout(ratio=0.1, inference)             -> eliminate_dropout
      6. Mul by 1, Add 0                           -> noop_arithmetic
      7. Transpose(0,2,3,1) -> Transpose(0,3,1,2)  -> transpose_elimination
      8. x*Sigmoid(x) computed twice, then Add     -> common_subexpression_elimination
      9. Exp -> Neg that nothing uses              -> eliminate_dead_code
     10. GlobalAveragePool -> Reshape whose shape is Shape->Gather->Unsqueeze->Concat
                                                    -> fold_constants / shape simplification
     11. MatMul with a weight made by Constant->Add->Mul, then Add bias (2-D)
                                                    -> fold_constants, fuse_matmul_add
    """
    rng = np.random.default_rng(SEED)
    f32 = np.float32
    c_in, c_mid, n_out = 3, 8, 4

    def init(name: str, arr: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(arr), name)

    inits = [
        init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
        init("conv_W", (rng.standard_normal((c_mid, c_in, 3, 3)) * 0.3).astype(f32)),
        init("conv_B", (rng.standard_normal(c_mid) * 0.1).astype(f32)),
        init("bn_gamma", rng.uniform(0.5, 1.5, c_mid).astype(f32)),
        init("bn_beta", rng.uniform(-0.2, 0.2, c_mid).astype(f32)),
        init("bn_mean", (rng.standard_normal(c_mid) * 0.3).astype(f32)),
        init("bn_var", rng.uniform(0.5, 2.0, c_mid).astype(f32)),
        init("dropout_ratio", np.array(0.1, f32)),
        init("one", np.array(1.0, f32)),
        init("zero", np.array(0.0, f32)),
        init("gather_idx", np.array(0, np.int64)),
        init("unsq_axes", np.array([0], np.int64)),
        init("minus_one", np.array([-1], np.int64)),
        init("fc_base", (rng.standard_normal((c_mid, n_out)) * 0.5).astype(f32)),
        init("fc_B", (rng.standard_normal(n_out) * 0.1).astype(f32)),
    ]
    N = helper.make_node
    nodes = [
        N("Identity", ["input"], ["x_id"], name="Identity_0"),
        N("Cast", ["x_id"], ["x_cast"], name="Cast_same_type", to=TensorProto.FLOAT),
        N("Pad", ["x_cast", "pads"], ["x_pad"], name="Pad_0", mode="constant"),
        N("Conv", ["x_pad", "conv_W", "conv_B"], ["conv"], name="Conv_0", kernel_shape=[3, 3],
          pads=[0, 0, 0, 0]),
        N("BatchNormalization", ["conv", "bn_gamma", "bn_beta", "bn_mean", "bn_var"], ["bn"],
          name="BatchNormalization_0", epsilon=1e-5),
        N("Relu", ["bn"], ["relu"], name="Relu_0"),
        N("Dropout", ["relu", "dropout_ratio"], ["drop"], name="Dropout_0"),
        N("Mul", ["drop", "one"], ["times_one"], name="Mul_by_one"),
        N("Add", ["times_one", "zero"], ["plus_zero"], name="Add_zero"),
        N("Transpose", ["plus_zero"], ["nhwc"], name="Transpose_to_nhwc", perm=[0, 2, 3, 1]),
        N("Transpose", ["nhwc"], ["nchw"], name="Transpose_to_nchw", perm=[0, 3, 1, 2]),
        N("Sigmoid", ["nchw"], ["sig_a"], name="Sigmoid_a"),
        N("Mul", ["nchw", "sig_a"], ["silu_a"], name="Mul_silu_a"),
        N("Sigmoid", ["nchw"], ["sig_b"], name="Sigmoid_b"),
        N("Mul", ["nchw", "sig_b"], ["silu_b"], name="Mul_silu_b"),
        N("Add", ["silu_a", "silu_b"], ["silu_sum"], name="Add_duplicates"),
        N("Exp", ["nchw"], ["dead_exp"], name="Exp_unused"),
        N("Neg", ["dead_exp"], ["dead_neg"], name="Neg_unused"),
        N("GlobalAveragePool", ["silu_sum"], ["pooled"], name="GlobalAveragePool_0"),
        N("Shape", ["pooled"], ["pooled_shape"], name="Shape_0"),
        N("Gather", ["pooled_shape", "gather_idx"], ["batch"], name="Gather_batch", axis=0),
        N("Unsqueeze", ["batch", "unsq_axes"], ["batch_1d"], name="Unsqueeze_batch"),
        N("Concat", ["batch_1d", "minus_one"], ["flat_shape"], name="Concat_shape", axis=0),
        N("Reshape", ["pooled", "flat_shape"], ["flat"], name="Reshape_flatten"),
        N("Constant", [], ["fc_shift"], name="Constant_shift",
          value=numpy_helper.from_array((rng.standard_normal((c_mid, n_out)) * 0.1).astype(f32))),
        N("Constant", [], ["fc_scale"], name="Constant_scale",
          value=numpy_helper.from_array(np.array(0.5, f32))),
        N("Add", ["fc_base", "fc_shift"], ["fc_shifted"], name="Add_const_weight"),
        N("Mul", ["fc_shifted", "fc_scale"], ["fc_W"], name="Mul_const_weight"),
        N("MatMul", ["flat", "fc_W"], ["mm"], name="MatMul_fc"),
        N("Add", ["mm", "fc_B"], ["output"], name="Add_fc_bias"),
    ]
    graph = helper.make_graph(
        nodes, "textbook",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, c_in, 16, 16])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, n_out])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", TS_OPSET)],
                              producer_name="fusionviz.make_samples", producer_version="1")
    model.ir_version = 8
    onnx.save(model, str(path))
    return model


def textbook_reference(x: np.ndarray, model: onnx.ModelProto) -> np.ndarray:
    """The textbook model's output computed with numpy, independent of onnxruntime."""
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            w[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cw = w["conv_W"]
    out = np.zeros((1, cw.shape[0], x.shape[2], x.shape[3]), np.float64)
    for i in range(3):
        for j in range(3):
            patch = xp[:, :, i:i + x.shape[2], j:j + x.shape[3]]
            out += np.einsum("bchw,oc->bohw", patch, cw[:, :, i, j])
    out += w["conv_B"][None, :, None, None]
    sh = lambda v: w[v][None, :, None, None]  # noqa: E731
    bn = (out - sh("bn_mean")) / np.sqrt(sh("bn_var") + 1e-5) * sh("bn_gamma") + sh("bn_beta")
    r = np.maximum(bn, 0)
    silu = r / (1 + np.exp(-r))
    pooled = (2 * silu).mean(axis=(2, 3))
    fc_w = (w["fc_base"] + w["fc_shift"]) * w["fc_scale"]
    return (pooled @ fc_w + w["fc_B"]).astype(np.float32)


# --------------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------------


def ort_run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check_structure(spec: SampleSpec, proto: onnx.ModelProto) -> Counter:
    ops = Counter(n.op_type for n in proto.graph.node)
    missing = [op for op in spec.must_have if ops[op] == 0]
    if missing:
        raise AssertionError(f"{spec.name}: expected ops missing: {missing}; have {dict(ops)}")
    for n in proto.graph.node:
        if n.op_type == "BatchNormalization":
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            if attrs.get("training_mode", 0) != 0 or len([o for o in n.output if o]) != 1:
                raise AssertionError(f"{spec.name}: BatchNormalization {n.name} is in training mode")
    if any(i.data_location == TensorProto.EXTERNAL for i in proto.graph.initializer):
        raise AssertionError(f"{spec.name}: uses external data")
    onnx.checker.check_model(proto, full_check=True)
    return ops


def compare(name: str, got: np.ndarray, want: np.ndarray, tol: float = 1e-4) -> float:
    err = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-12))
    if not err < tol:
        raise AssertionError(f"{name}: onnxruntime differs from reference, rel err {err:.3g}")
    logger.info("  %s: ORT vs reference max rel err %.2e", name, err)
    return err


# --------------------------------------------------------------------------------------------
# drivers
# --------------------------------------------------------------------------------------------


def _image_input(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(SEED).standard_normal(shape).astype(np.float32)


def make_resnet(out: Path, check: bool) -> None:
    import torch

    model = build_resnet()
    x = torch.from_numpy(_image_input(RESNET_SHAPE))
    export_torchscript(model, (x,), out / "resnet_ts.onnx", input_names=["input"], output_names=["output"])
    export_dynamo(model, (x,), out / "resnet_dynamo.onnx", input_names=["input"], output_names=["output"])
    if check:
        with torch.no_grad():
            want = model(x).numpy()
        for name in ("resnet_ts", "resnet_dynamo"):
            compare(name, ort_run(out / f"{name}.onnx", {"input": x.numpy()})[0], want)


def make_mobilenet(out: Path, check: bool) -> None:
    import torch

    model = build_mobilenet()
    x = torch.from_numpy(_image_input(MOBILENET_SHAPE))
    export_torchscript(model, (x,), out / "mobilenet.onnx", input_names=["input"], output_names=["output"])
    if check:
        with torch.no_grad():
            want = model(x).numpy()
        compare("mobilenet", ort_run(out / "mobilenet.onnx", {"input": x.numpy()})[0], want)


def make_efficientnet(out: Path, check: bool) -> None:
    import torch

    model = build_efficientnet()
    x = torch.from_numpy(_image_input(EFFICIENTNET_SHAPE))
    export_torchscript(model, (x,), out / "efficientnet.onnx", input_names=["input"], output_names=["output"])
    if check:
        with torch.no_grad():
            want = model(x).numpy()
        compare("efficientnet", ort_run(out / "efficientnet.onnx", {"input": x.numpy()})[0], want)


def _bert_inputs(batch: int, seq: int, pad: int = 0):
    import torch

    rng = np.random.default_rng(SEED + seq)
    ids = torch.from_numpy(rng.integers(0, BERT_VOCAB, (batch, seq), dtype=np.int64))
    mask = torch.ones((batch, seq), dtype=torch.int64)
    if pad:
        mask[-1, seq - pad:] = 0
    return ids, mask


def make_bert(out: Path, check: bool) -> None:
    import torch
    from torch.export import Dim

    model = build_bert()
    args = _bert_inputs(2, 16)
    names = dict(input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"])
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
            "last_hidden_state": {0: "batch", 1: "seq"}}
    export_torchscript(model, args, out / "bert_ts.onnx", dynamic_axes=axes, **names)
    batch, seq = Dim("batch", max=64), Dim("seq", min=2, max=BERT_MAX_POS)
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    export_dynamo(model, args, out / "bert_dynamo.onnx", dynamic_shapes=shapes, **names)
    if check:
        for seq_len in (32, 128):
            ids, mask = _bert_inputs(2, seq_len, pad=5)
            with torch.no_grad():
                want = model(ids, mask).numpy()
            for name in ("bert_ts", "bert_dynamo"):
                got = ort_run(out / f"{name}.onnx", {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
                compare(f"{name} seq {seq_len}", got, want)


def make_textbook(out: Path, check: bool) -> None:
    model = build_textbook(out / "textbook.onnx")
    if check:
        x = np.random.default_rng(SEED).standard_normal((1, 3, 16, 16)).astype(np.float32)
        compare("textbook", ort_run(out / "textbook.onnx", {"input": x})[0], textbook_reference(x, model))


MAKERS: dict[str, tuple[tuple[str, ...], Callable[[Path, bool], None]]] = {
    "resnet": (("resnet_ts", "resnet_dynamo"), make_resnet),
    "bert": (("bert_ts", "bert_dynamo"), make_bert),
    "mobilenet": (("mobilenet",), make_mobilenet),
    "efficientnet": (("efficientnet",), make_efficientnet),
    "textbook": (("textbook",), make_textbook),
}


def write_index(out: Path) -> None:
    entries = [{"name": s.name, "file": f"{s.name}.onnx", "title": s.title,
                "description": s.description, "shows": list(s.shows), "made_with": s.made_with,
                "must_have": list(s.must_have)}
               for s in SAMPLES]
    (out / "samples.json").write_text(json.dumps(entries, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: sample_models/)")
    parser.add_argument("--only", default="", help="comma-separated sample names to (re)make")
    parser.add_argument("--no-check", action="store_true", help="skip the onnxruntime comparisons")
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out: Path = ns.out
    out.mkdir(parents=True, exist_ok=True)
    wanted = {w for w in ns.only.split(",") if w}
    specs = {s.name: s for s in SAMPLES}
    unknown = wanted - set(specs)
    if unknown:
        parser.error(f"unknown samples: {sorted(unknown)}")
    for names, maker in MAKERS.values():
        if wanted and not wanted & set(names):
            continue
        logger.info("making %s", ", ".join(names))
        maker(out, not ns.no_check)
        for name in names:
            path = out / f"{name}.onnx"
            proto = onnx.load(str(path))
            ops = check_structure(specs[name], proto)
            digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
            logger.info("  %s: %.2f MB, %d nodes, %d op types, sha256 %s", path.name,
                        path.stat().st_size / 1e6, sum(ops.values()), len(ops), digest)
    write_index(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
