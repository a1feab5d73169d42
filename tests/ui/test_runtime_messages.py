"""onnxruntime's raw allocator message never reaches the page: it is one readable line."""

from __future__ import annotations

from fusionviz import errors
from fusionviz.ui import state

BFC = ("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running Conv node. "
       "Name:'/backbone/conv1/Conv' Status Message: /onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:376 "
       "void* onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, "
       "onnxruntime::WaitNotificationFn) Failed to allocate memory for requested buffer of size 4294967296")


def test_a_bfc_arena_failure_is_one_readable_line():
    line = state.scrub(f"Benchmark failed: {BFC}")
    assert "bfc_arena" not in line and "BFCArena" not in line and "onnxruntime_src" not in line
    assert "ran out of memory" in line and "4.0 GB" in line and "(Conv)" in line  # (scrub shortens the name)
    assert "'/backbone/conv1/Conv' (Conv)" in errors.readable_runtime_message(BFC)


def test_other_runtime_source_positions_are_cut():
    raw = ("Status Message: /onnxruntime_src/onnxruntime/core/providers/cpu/tensor/reshape_helper.h:47 "
           "onnxruntime::ReshapeHelper::ReshapeHelper(const onnxruntime::TensorShape&, onnxruntime::TensorShapeVector&, "
           "bool) size != 0 && (input_shape_size % size) == 0 was false. The input tensor cannot be reshaped")
    line = errors.readable_runtime_message(raw)
    assert ".h:47" not in line and "ReshapeHelper::" not in line
    assert "The input tensor cannot be reshaped" in line and line.startswith("Status Message: size != 0")


def test_plain_text_is_left_alone():
    assert errors.readable_runtime_message("Input 'x' is not a tensor.") == "Input 'x' is not a tensor."
