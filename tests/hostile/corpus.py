"""A corpus of hostile and broken inputs, generated on the fly; nothing is downloaded.

``build_corpus(root)`` writes every case under ``root`` and returns :class:`Case` records. Each
case says whether it is a loadable model (``valid``: ``info`` must exit 0 and print it escaped) or
a bad input (``info`` must exit 2 with one line), and which words the one line must contain, so a
case that fails for the wrong reason (e.g. "not a protobuf" instead of "outside the folder") is
caught.

Cases that need no disk space beyond a few MB, and build in well under a second each, except the
zip bomb (~0.5 s: 2 GiB of zeros are compressed once as a 16 MiB block and the identical
compressed block is repeated, which deflate allows after a full flush).
"""

from __future__ import annotations

import dataclasses
import os
import random
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
from onnx import TensorProto, helper, numpy_helper

HUGE = 2**40

#: Text that must never reach a terminal, DOT file or HTML page raw.
NASTY = (
    '<script>alert("x")</script> "quoted" \'single\' {braces} [brackets] back\\slash '
    "new\nline tab\t cr\r ansi\x1b[2J\x1b[31mRED bidi\u202eevil nul\x00 "
    'digraph G { a -> b [label="<b>x</b>"]; } -- ]]> <!-- &amp; <tr><td>'
)


@dataclasses.dataclass(frozen=True)
class Case:
    """One hostile input.

    Attributes:
        name: id used in test names.
        path: the file or folder to hand to the CLI / loader.
        valid: True when it is a loadable model (info exits 0), False when it must be refused.
        expect: lowercase words of which at least one must appear in the error line (bad cases).
        env: extra environment variables for the CLI run (e.g. a small size limit).
        runnable: for valid cases, whether onnxruntime can run it (optimize may then exit 0/3;
            otherwise it must exit 2 with a reason).
    """

    name: str
    path: Path
    valid: bool
    expect: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    runnable: bool = True


# --------------------------------------------------------------------------- small models


def tiny_model() -> onnx.ModelProto:
    """y = Relu(x) + W, with a 4-float initializer: small, valid, runs in onnxruntime."""
    model = onnx.parser.parse_model(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        tiny (float[1,4] x) => (float[1,4] y) {
            r = Relu(x)
            y = Add(r, W)
        }
        """
    )
    model.graph.initializer.append(
        numpy_helper.from_array(np.array([1.0, 2.0, 3.0, 4.0], np.float32), "W")
    )
    onnx.checker.check_model(model)
    return model


def _external(model: onnx.ModelProto, location: str, offset: int = 0, length: int | None = None) -> onnx.ModelProto:
    """Point initializer W at external data ``location`` (the bytes themselves are written by the caller)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    t = m.graph.initializer[0]
    raw = t.raw_data or np.asarray(numpy_helper.to_array(t)).tobytes()
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset), "length": str(len(raw) if length is None else length)}
    for k, v in entries.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    return m


def _write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)
    return path


def _save(path: Path, model: onnx.ModelProto) -> Path:
    return _write(path, model.SerializeToString())


def _graph_model(nodes, inputs, outputs, initializers=(), opsets=(("", 17),), ir_version=8) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
                             ir_version=ir_version)


def _lying_tensor(name: str, dims: list[int], raw: bytes) -> onnx.TensorProto:
    """A float tensor whose dims claim far more than ``raw`` holds (helper.make_tensor refuses)."""
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.raw_data = raw
    return t


def _vi(name: str, dims=(1, 4), dtype=TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, list(dims))


# --------------------------------------------------------------------------- raw protobuf


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _ld(field: int, data: bytes | str) -> bytes:
    """A length-delimited protobuf field."""
    if isinstance(data, str):
        data = data.encode()
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _vf(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def deep_model_bytes(depth: int, op: str = "If") -> bytes:
    """A ModelProto with ``depth`` nested If (or Loop) subgraphs, encoded by hand.

    The python protobuf runtime (upb) refuses to build or parse messages nested deeper than 100,
    so the bytes are written field by field instead.
    """
    vi_y = _vi("y").SerializeToString()
    leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "leaf", [], [_vi("y")])
    g = leaf.SerializeToString()
    for i in range(depth):
        if op == "If":
            attrs = (_ld(5, _ld(1, "then_branch") + _vf(20, 5) + _ld(6, g))
                     + _ld(5, _ld(1, "else_branch") + _vf(20, 5) + _ld(6, leaf.SerializeToString())))
            ins = _ld(1, "c")
        else:  # Loop: body(iter, cond_in) -> (cond_out, y)
            attrs = _ld(5, _ld(1, "body") + _vf(20, 5) + _ld(6, g))
            ins = _ld(1, "M") + _ld(1, "c")
        node = ins + _ld(2, "y") + _ld(3, f"{op.lower()}_{i}") + _ld(4, op) + attrs
        g = _ld(1, node) + _ld(2, f"level_{i}") + _ld(12, vi_y)
    inputs = b"".join(_ld(11, helper.make_tensor_value_info(n, t, s).SerializeToString())
                      for n, t, s in (("x", TensorProto.FLOAT, [1, 4]), ("c", TensorProto.BOOL, []),
                                      ("M", TensorProto.INT64, [])))
    return _vf(1, 8) + _ld(8, helper.make_opsetid("", 17).SerializeToString()) + _ld(7, g + inputs)


def nested_if_model(depth: int) -> onnx.ModelProto:
    """A valid model with ``depth`` nested If subgraphs (within protobuf's nesting limit)."""
    leaf = helper.make_graph([helper.make_node("Relu", ["x"], ["y0"])], "leaf", [], [_vi("y0")])
    g = leaf
    for i in range(depth):
        other = helper.make_graph([helper.make_node("Neg", ["x"], [f"n{i}"])], f"else_{i}", [], [_vi(f"n{i}")])
        node = helper.make_node("If", ["c"], [f"y{i + 1}"], name=f"if_{i}", then_branch=g, else_branch=other)
        g = helper.make_graph([node], f"level_{i}", [], [_vi(f"y{i + 1}")])
    main = helper.make_graph(list(g.node), "main",
                             [_vi("x"), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                             [_vi(f"y{depth}")])
    return helper.make_model(main, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


# --------------------------------------------------------------------------- zips


def _zip(path: Path, members: list[tuple[str | zipfile.ZipInfo, bytes]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in members:
            z.writestr(name, data)
    return path


def _symlink_zip(path: Path) -> Path:
    info = zipfile.ZipInfo("weights.bin")
    info.create_system = 3  # unix
    info.external_attr = (0o120777 << 16)  # S_IFLNK | 0777
    model = _external(tiny_model(), "weights.bin")
    return _zip(path, [("model.onnx", model.SerializeToString()), (info, b"/etc/passwd")])


def zip_bomb(path: Path, expanded: int = 2**31, name: str = "model.onnx", declared: int | None = None) -> Path:
    """A zip whose one member inflates to ``expanded`` bytes of zeros from ~1/1000 of that.

    Nothing of that size is held in memory: 16 MiB of zeros are deflated once, ending with a full
    flush (which resets the compressor), so the same compressed block is valid again and again.
    ``declared`` lets the header lie about the expanded size (a bomb that hides its size).
    """
    block = 1 << 24
    assert expanded % block == 0
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = comp.compress(bytes(block)) + comp.flush(zlib.Z_FULL_FLUSH)
    tail = comp.flush(zlib.Z_FINISH)
    count = expanded // block
    crc = 0
    zeros = bytes(block)
    for _ in range(count):
        crc = zlib.crc32(zeros, crc)
    csize = len(piece) * count + len(tail)
    usize = expanded if declared is None else declared
    fname = name.encode()
    # local header, data, central directory, end record (sizes < 4 GiB: no zip64 needed)
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, csize, usize, len(fname), 0) + fname
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, crc, csize, usize,
                          len(fname), 0, 0, 0, 0, 0, 0) + fname
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(local)
        for _ in range(count):
            f.write(piece)
        f.write(tail)
        cd_offset = f.tell()
        f.write(central)
        f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), cd_offset, 0))
    return path


# --------------------------------------------------------------------------- the cases


def _bad(name: str, *expect: str, env: dict[str, str] | None = None):
    def deco(fn: Callable[[Path], Path]):
        _BUILDERS.append((name, fn, False, tuple(expect), tuple((env or {}).items()), True))
        return fn
    return deco


def _good(name: str, runnable: bool = True):
    def deco(fn: Callable[[Path], Path]):
        _BUILDERS.append((name, fn, True, (), (), runnable))
        return fn
    return deco


_BUILDERS: list[tuple] = []


@_bad("empty_file", "empty")
def _(d: Path) -> Path:
    return _write(d / "empty.onnx", b"")


@_bad("random_bytes", "not an onnx model")
def _(d: Path) -> Path:
    return _write(d / "random.onnx", random.Random(8).randbytes(4096))


@_bad("truncated_model", "not an onnx model", "checker", "truncat")
def _(d: Path) -> Path:
    data = tiny_model().SerializeToString()
    return _write(d / "truncated.onnx", data[: len(data) * 2 // 3])


@_bad("text_file", "not an onnx model")
def _(d: Path) -> Path:
    return _write(d / "notes.onnx", "This is not a model.\nJust some text, a newline, and 'quotes'.\n")


@_bad("tensor_proto", "not an onnx model")
def _(d: Path) -> Path:
    return _write(d / "tensor.onnx", numpy_helper.from_array(np.ones((3, 3), np.float32), "t").SerializeToString())


@_bad("graph_proto", "not an onnx model")
def _(d: Path) -> Path:
    return _write(d / "graph.onnx", tiny_model().graph.SerializeToString())


@_bad("node_proto", "not an onnx model")
def _(d: Path) -> Path:
    return _write(d / "node.onnx", helper.make_node("Relu", ["x"], ["y"], name="n").SerializeToString())


@_bad("cycle", "checker", "cycle", "sorted")
def _(d: Path) -> Path:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="add_a"),
             helper.make_node("Relu", ["a"], ["b"], name="relu_b"),
             helper.make_node("Identity", ["b"], ["y"], name="out")]
    return _save(d / "cycle.onnx", _graph_model(nodes, [_vi("x")], [_vi("y")]))


@_bad("dangling_input", "checker", "ghost")
def _(d: Path) -> Path:
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add_ghost")]
    return _save(d / "dangling.onnx", _graph_model(nodes, [_vi("x")], [_vi("y")]))


@_bad("duplicate_output_names", "checker", "ssa", "dup")
def _(d: Path) -> Path:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="first"),
             helper.make_node("Neg", ["x"], ["y"], name="second")]
    return _save(d / "dup.onnx", _graph_model(nodes, [_vi("x")], [_vi("y")]))


@_bad("unknown_op", "checker", "frobnicate")
def _(d: Path) -> Path:
    nodes = [helper.make_node("Frobnicate", ["x"], ["y"], name="frob")]
    return _save(d / "unknown_op.onnx", _graph_model(nodes, [_vi("x")], [_vi("y")]))


@_bad("unknown_domain_not_imported", "checker", "opset", "domain")
def _(d: Path) -> Path:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.nowhere")]
    return _save(d / "unknown_domain.onnx", _graph_model(nodes, [_vi("x")], [_vi("y")]))


@_good("custom_domain_op", runnable=False)
def _(d: Path) -> Path:
    nodes = [helper.make_node("MagicKernel", ["x"], ["y"], name="magic", domain="com.example.custom")]
    return _save(d / "custom_op.onnx",
                 _graph_model(nodes, [_vi("x")], [_vi("y")], opsets=(("", 17), ("com.example.custom", 1))))


@_good("unknown_op_in_ms_domain", runnable=False)
def _(d: Path) -> Path:
    nodes = [helper.make_node("NoSuchContribOp", ["x"], ["y"], name="nope", domain="com.microsoft")]
    return _save(d / "ms_unknown.onnx",
                 _graph_model(nodes, [_vi("x")], [_vi("y")], opsets=(("", 17), ("com.microsoft", 1))))


def _relu_model(**kw) -> onnx.ModelProto:
    return _graph_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x")], [_vi("y")], **kw)


@_bad("ir_version_too_high", "ir version")
def _(d: Path) -> Path:
    return _save(d / "ir99.onnx", _relu_model(ir_version=99))


@_bad("ir_version_too_low", "ir version")
def _(d: Path) -> Path:
    return _save(d / "ir1.onnx", _relu_model(ir_version=1))


@_bad("opset_too_high", "opset")
def _(d: Path) -> Path:
    return _save(d / "opset999.onnx", _relu_model(opsets=(("", 999),)))


@_bad("opset_too_low", "opset")
def _(d: Path) -> Path:
    return _save(d / "opset1.onnx", _relu_model(opsets=(("", 1),)))


@_bad("ext_absolute_path", "absolute")
def _(d: Path) -> Path:
    return _save(d / "abs" / "model.onnx", _external(tiny_model(), "/etc/passwd"))


@_bad("ext_dotdot_path", "outside")
def _(d: Path) -> Path:
    return _save(d / "dotdot" / "model.onnx", _external(tiny_model(), "../../etc/passwd"))


@_bad("ext_dotdot_sibling", "outside")
def _(d: Path) -> Path:
    # the target really exists next to the folder: refusal must not depend on it being missing
    _write(d / "secret.bin", b"S" * 64)
    return _save(d / "sib" / "model.onnx", _external(tiny_model(), "sub/../../secret.bin"))


@_bad("ext_symlink_file_out", "outside")
def _(d: Path) -> Path:
    target = _write(d / "outside" / "secret.bin", b"S" * 64)
    folder = d / "symfile"
    folder.mkdir(parents=True)
    os.symlink(target, folder / "weights.bin")
    return _save(folder / "model.onnx", _external(tiny_model(), "weights.bin"))


@_bad("ext_symlink_dir_out", "outside")
def _(d: Path) -> Path:
    _write(d / "outside2" / "weights.bin", b"S" * 64)
    folder = d / "symdir"
    folder.mkdir(parents=True)
    os.symlink(d / "outside2", folder / "data")
    return _save(folder / "model.onnx", _external(tiny_model(), "data/weights.bin"))


@_bad("ext_offset_past_eof", "only", "past")
def _(d: Path) -> Path:
    _write(d / "off" / "weights.bin", b"\0" * 16)
    return _save(d / "off" / "model.onnx", _external(tiny_model(), "weights.bin", offset=1 << 30))


@_bad("ext_length_past_eof", "only", "past")
def _(d: Path) -> Path:
    _write(d / "len" / "weights.bin", b"\0" * 8)
    return _save(d / "len" / "model.onnx", _external(tiny_model(), "weights.bin", length=16))


@_bad("ext_missing_file", "missing")
def _(d: Path) -> Path:
    return _save(d / "missing" / "model.onnx", _external(tiny_model(), "weights.bin"))


@_good("ext_data_folder_ok")
def _(d: Path) -> Path:
    _write(d / "okdir" / "weights.bin", np.array([1, 2, 3, 4], np.float32).tobytes())
    _save(d / "okdir" / "model.onnx", _external(tiny_model(), "weights.bin"))
    return d / "okdir"


@_good("ext_data_zip_ok")
def _(d: Path) -> Path:
    model = _external(tiny_model(), "weights.bin")
    return _zip(d / "ok.zip", [("m/model.onnx", model.SerializeToString()),
                               ("m/weights.bin", np.array([1, 2, 3, 4], np.float32).tobytes())])


@_good("input_dims_2pow40", runnable=False)
def _(d: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [HUGE, HUGE])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [HUGE, HUGE])
    return _save(d / "huge_input.onnx", _graph_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [x], [y]))


@_bad("initializer_dims_2pow40", "declares")
def _(d: Path) -> Path:
    w = _lying_tensor("W", [HUGE], b"\0\0\0\0")
    nodes = [helper.make_node("Add", ["x", "W"], ["y"], name="add")]
    return _save(d / "huge_init.onnx", _graph_model(nodes, [_vi("x", [HUGE])], [_vi("y", [HUGE])], initializers=[w]))


@_bad("constant_claims_gigabytes", "declares")
def _(d: Path) -> Path:
    t = _lying_tensor("c", [1 << 16, 1 << 16], b"\0" * 16)
    nodes = [helper.make_node("Constant", [], ["k"], name="big_const", value=t),
             helper.make_node("Add", ["x", "k"], ["y"], name="add")]
    return _save(d / "big_const.onnx", _graph_model(nodes, [_vi("x", [1, 1])], [_vi("y", [1 << 16, 1 << 16])]))


@_good("constant_of_shape_huge", runnable=False)
def _(d: Path) -> Path:
    # valid: a ConstantOfShape that would allocate 16 GiB if anything folded it blindly
    shape = numpy_helper.from_array(np.array([1 << 16, 1 << 16], np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["k"], name="cos"),
             helper.make_node("Add", ["x", "k"], ["y"], name="add")]
    return _save(d / "cos_huge.onnx", _graph_model(nodes, [_vi("x", [1, 1])], [_vi("y", [1 << 16, 1 << 16])],
                                                   initializers=[shape]))


@_good("names_10000_chars")
def _(d: Path) -> Path:
    long_in, long_mid, long_out = ("i" * 10_000), ("m" * 10_000), ("o" * 10_000)
    nodes = [helper.make_node("Relu", [long_in], [long_mid], name="N" * 10_000),
             helper.make_node("Neg", [long_mid], [long_out], name="n" * 10_000)]
    return _save(d / "long_names.onnx", _graph_model(nodes, [_vi(long_in)], [_vi(long_out)]))


@_good("names_with_markup")
def _(d: Path) -> Path:
    xin, mid, yout = "x" + NASTY, "mid" + NASTY, "y" + NASTY
    nodes = [helper.make_node("Relu", [xin], [mid], name="relu" + NASTY, doc_string=NASTY),
             helper.make_node("Neg", [mid], [yout], name="neg" + NASTY, doc_string=NASTY)]
    model = _graph_model(nodes, [_vi(xin)], [_vi(yout)])
    model.graph.name = "graph" + NASTY
    model.graph.doc_string = NASTY
    model.doc_string = NASTY
    model.producer_name = "producer" + NASTY
    model.producer_version = NASTY
    helper.set_model_props(model, {"author" + NASTY: NASTY})
    return _save(d / "markup.onnx", model)


@_bad("invalid_utf8_names", "utf-8")
def _(d: Path) -> Path:
    # protobuf returns invalid UTF-8 text as bytes; the ONNX checker accepts it, onnx-ir does not
    m = tiny_model()
    m.graph.node[0].name = "RELUNAME"
    data = m.SerializeToString().replace(b"RELUNAME", b"RE\xff\xfeNAME")
    return _write(d / "bad_utf8.onnx", data)


@_good("nested_if_depth_30")
def _(d: Path) -> Path:
    return _save(d / "nested30.onnx", nested_if_model(30))


@_bad("nested_if_depth_200", "nested")
def _(d: Path) -> Path:
    return _write(d / "nested_if_200.onnx", deep_model_bytes(200, "If"))


@_bad("nested_loop_depth_200", "nested")
def _(d: Path) -> Path:
    return _write(d / "nested_loop_200.onnx", deep_model_bytes(200, "Loop"))


@_bad("zip_entry_dotdot", "escapes")
def _(d: Path) -> Path:
    return _zip(d / "dotdot.zip", [("../evil.onnx", tiny_model().SerializeToString())])


@_bad("zip_entry_absolute", "escapes")
def _(d: Path) -> Path:
    info = zipfile.ZipInfo("placeholder.onnx")
    info.filename = "/tmp/fusionviz_evil.onnx"  # ZipInfo() strips a leading '/', so set it after
    return _zip(d / "absolute.zip", [(info, tiny_model().SerializeToString())])


@_bad("zip_entry_symlink", "symlink")
def _(d: Path) -> Path:
    return _symlink_zip(d / "symlink.zip")


@_bad("zip_bomb_2gib", "zip bomb", "limit")
def _(d: Path) -> Path:
    return zip_bomb(d / "bomb.zip")


@_bad("zip_bomb_ratio_256mib", "zip bomb")
def _(d: Path) -> Path:
    # under the total-size limit, but 1000:1: caught by the ratio rule
    return zip_bomb(d / "bomb_ratio.zip", expanded=1 << 28)


@_bad("zip_bomb_lying_header", "zip", "broken", "bomb")
def _(d: Path) -> Path:
    # the header claims 1 KiB; the stream inflates to 256 MiB
    return zip_bomb(d / "bomb_liar.zip", expanded=1 << 28, declared=1024)


@_bad("zip_two_models", "choose one", ".onnx files")
def _(d: Path) -> Path:
    data = tiny_model().SerializeToString()
    return _zip(d / "two.zip", [("a/one.onnx", data), ("b/two.onnx", data)])


@_bad("zip_no_model", "no .onnx")
def _(d: Path) -> Path:
    return _zip(d / "nomodel.zip", [("readme.txt", b"hello")])


@_bad("zip_broken", "zip")
def _(d: Path) -> Path:
    return _write(d / "broken.zip", b"PK\x03\x04" + random.Random(3).randbytes(500))


@_bad("folder_without_model", "no .onnx")
def _(d: Path) -> Path:
    _write(d / "empty_dir" / "readme.txt", "nothing here")
    return d / "empty_dir"


@_bad("no_such_file", "no such")
def _(d: Path) -> Path:
    return d / "does_not_exist.onnx"


@_bad("over_size_limit", "limit", env={"FUSIONVIZ_MAX_MODEL_MB": "0.0001"})
def _(d: Path) -> Path:
    return _save(d / "over_limit.onnx", tiny_model())


CASE_NAMES: tuple[str, ...] = tuple(b[0] for b in _BUILDERS)


def build_corpus(root: Path) -> dict[str, Case]:
    """Write every case under ``root``; return them by name."""
    cases: dict[str, Case] = {}
    for name, fn, valid, expect, env, runnable in _BUILDERS:
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        cases[name] = Case(name, fn(d), valid, expect, env, runnable)
    return cases
