"""qjit.Linear made from float32 weights: forwards on numpy arrays against x @ dequantize(), shapes,
layouts, out=, the quantization methods, save and load, tuning, threads and lifetimes."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import qjit
from conftest import assert_forward_matches

SHAPES = [(200, 72), (64, 33), (256, 256)]  # (K, N): K not a multiple of the group, odd N, square


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("group_size", [32, 128, -1])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("k,n", SHAPES)
def test_forward_matches_dequantized_matrix(exact_context, default_context, rng, bits, group_size, symmetric, k, n):
    w = rng.standard_normal((n, k), dtype=np.float32)
    for context, int8 in ((exact_context, False), (default_context, bits < 8)):
        layer = qjit.Linear.quantize(context, w, bits=bits, group_size=group_size, symmetric=symmetric)
        assert (layer.in_features, layer.out_features) == (k, n)
        for batch in [(1,), (3, 5), (k,)]:
            x = rng.standard_normal(batch + (k,), dtype=np.float32)
            y = layer(x)
            assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == batch + (n,)
            assert_forward_matches(layer, x, y, int8)


def test_a_vector_is_one_row(exact_context, rng):
    layer = qjit.Linear.quantize(exact_context, rng.standard_normal((40, 96), dtype=np.float32), group_size=32)
    x = rng.standard_normal(96, dtype=np.float32)
    assert layer(x).shape == (40,)
    np.testing.assert_array_equal(layer(x), layer(x[None, :])[0])


def test_an_empty_batch_gives_an_empty_result(exact_context, rng):
    layer = qjit.Linear.quantize(exact_context, rng.standard_normal((40, 96), dtype=np.float32), group_size=32)
    assert layer(np.zeros((0, 96), np.float32)).shape == (0, 40)
    assert layer(np.zeros((2, 0, 96), np.float32)).shape == (2, 0, 40)


def test_dequantize_is_close_to_the_weights(exact_context, rng):
    w = rng.standard_normal((72, 200), dtype=np.float32)
    layer = qjit.Linear.quantize(exact_context, w, bits=8, group_size=32)
    dequantized = layer.dequantize()
    assert dequantized.shape == (200, 72) and dequantized.dtype == np.float32
    step = (w.max() - w.min()) / 255
    assert np.abs(dequantized - w.T).max() <= step  # 8-bit groups of 32: within one step of the weights


def test_both_layouts_make_the_same_layer(exact_context, rng):
    w = rng.standard_normal((72, 200), dtype=np.float32)
    n_by_k = qjit.Linear.quantize(exact_context, w, group_size=64)
    k_by_n = qjit.Linear.quantize(exact_context, np.ascontiguousarray(w.T), group_size=64, layout="k_by_n")
    np.testing.assert_array_equal(n_by_k.dequantize(), k_by_n.dequantize())


def test_strided_inputs_are_copied_once_and_give_the_same_result(exact_context, rng):
    layer = qjit.Linear.quantize(exact_context, rng.standard_normal((40, 96), dtype=np.float32), group_size=32)
    x = rng.standard_normal((96, 6), dtype=np.float32).T  # a transposed view: not C-contiguous
    assert not x.flags.c_contiguous
    np.testing.assert_array_equal(layer(x), layer(np.ascontiguousarray(x)))
    weights = rng.standard_normal((96, 40), dtype=np.float32).T  # strided weights too
    strided = qjit.Linear.quantize(exact_context, weights, group_size=32)
    np.testing.assert_array_equal(strided.dequantize(), layer.__class__.quantize(
        exact_context, np.ascontiguousarray(weights), group_size=32).dequantize())


def test_out_is_written_in_place(exact_context, rng):
    layer = qjit.Linear.quantize(exact_context, rng.standard_normal((40, 96), dtype=np.float32), group_size=32)
    x = rng.standard_normal((3, 96), dtype=np.float32)
    out = np.full((3, 40), np.nan, np.float32)
    assert layer.forward(x, out=out) is out
    np.testing.assert_array_equal(out, layer(x))


@pytest.mark.parametrize("out,needle", [
    (np.zeros((3, 41), np.float32), "shape (3, 41), expected (3, 40)"),
    (np.zeros((3, 40), np.float64), "float32"),
    (np.zeros((40, 3), np.float32).T, "not C-contiguous"),
])
def test_a_wrong_out_is_refused(exact_context, rng, out, needle):
    layer = qjit.Linear.quantize(exact_context, rng.standard_normal((40, 96), dtype=np.float32), group_size=32)
    with pytest.raises(qjit.InvalidArgumentError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        layer.forward(rng.standard_normal((3, 96), dtype=np.float32), out=out)


def test_out_overlapping_x_is_refused(exact_context, rng):
    layer = qjit.Linear.quantize(exact_context, rng.standard_normal((32, 32), dtype=np.float32), group_size=32)
    x = rng.standard_normal((2, 32), dtype=np.float32)
    with pytest.raises(qjit.InvalidArgumentError, match="overlaps"):
        layer.forward(x, out=x)


@pytest.mark.parametrize("x,needle", [
    (np.zeros((2, 96), np.float64), "x: dtype float64, expected float32"),
    (np.zeros((2, 95), np.float32), "last dimension must be K = 96"),
    (np.float32(1.0), "0 dimensions"),
    ("text", "expected an array"),
])
def test_bad_inputs_are_refused_by_name(exact_context, rng, x, needle):
    layer = qjit.Linear.quantize(exact_context, rng.standard_normal((40, 96), dtype=np.float32), group_size=32)
    with pytest.raises(qjit.InvalidArgumentError, match=needle):
        layer(x)


def test_read_only_inputs_are_accepted(exact_context, rng):
    layer = qjit.Linear.quantize(exact_context, rng.standard_normal((40, 96), dtype=np.float32), group_size=32)
    x = rng.standard_normal((2, 96), dtype=np.float32)
    frozen = x.copy()
    frozen.flags.writeable = False
    np.testing.assert_array_equal(layer(frozen), layer(x))


@pytest.mark.parametrize("method,options", [
    ("hqq", {}),
    ("milo", {"rank": 8}),
    ("milo", {"rank": 4, "low_rank_bits": 16}),
    ("mixed", {"mixed_alpha": 0.5}),
])
def test_calibration_free_methods(exact_context, rng, method, options):
    k, n = 256, 72
    w = rng.standard_normal((n, k), dtype=np.float32)
    layer = qjit.Linear.quantize(exact_context, w, bits=3, group_size=64, method=method, **options)
    info = layer.info
    if method == "milo":
        assert info.low_rank == options["rank"] and info.low_rank_bytes > 0
    if method == "mixed":
        assert 0 < info.wide_groups < 4 * n  # some K-groups in 4 bits, not all
    # Each method approximates W at least as well as a plain round to nearest at its narrowest width.
    rtn = qjit.Linear.quantize(exact_context, w, bits=2 if method == "mixed" else 3, group_size=64)
    x = rng.standard_normal((4, k), dtype=np.float32)
    assert_forward_matches(layer, x, layer(x), int8_activations=False)
    error = np.linalg.norm(layer.dequantize() - w.T)
    assert error <= np.linalg.norm(rtn.dequantize() - w.T) * 1.0001


@pytest.mark.parametrize("scale_dtype", ["f16", "f32"])
def test_float_offsets_fit_each_groups_range(exact_context, default_context, rng, scale_dtype):
    k, n = 200, 33
    w = rng.standard_normal((n, k), dtype=np.float32) + 10.0  # groups far from zero
    for context, int8 in ((exact_context, False), (default_context, True)):
        layer = qjit.Linear.quantize(context, w, bits=4, group_size=32, float_offsets=True, scale_dtype=scale_dtype)
        assert layer.info.float_offsets and "_off" in layer.describe()
        x = rng.standard_normal((3, k), dtype=np.float32)
        assert_forward_matches(layer, x, layer(x), int8)
    # Integer zero points spend codes on the range down to 0; offsets spend them on the group's own.
    asym = qjit.Linear.quantize(exact_context, w, bits=4, group_size=32, scale_dtype=scale_dtype)
    assert np.linalg.norm(layer.dequantize() - w.T) < 0.5 * np.linalg.norm(asym.dequantize() - w.T)
    with pytest.raises(qjit.InvalidArgumentError, match="float_offsets"):
        qjit.Linear.quantize(exact_context, w, bits=4, float_offsets=True, symmetric=True)


def test_zero_point_form_is_the_methods_measured_choice(exact_context, rng):
    k, n = 130, 17
    w = rng.standard_normal((n, k), dtype=np.float32)
    def offsets(method, **options):
        return qjit.Linear.quantize(exact_context, w, bits=3, group_size=32, method=method, **options).info.float_offsets
    assert offsets("hqq") and not offsets("rtn")  # hqq fits offsets, rtn keeps integer zero points
    assert not offsets("hqq", float_offsets=False) and offsets("rtn", float_offsets=True)
    assert not qjit.Linear.quantize(exact_context, w, bits=3, group_size=32, method="hqq",
                                    symmetric=True).info.float_offsets


@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_with_a_calibration(exact_context, rng, act_order):
    k, n = 128, 48
    w = rng.standard_normal((n, k), dtype=np.float32)
    scale = np.linspace(0.1, 3.0, k, dtype=np.float32)  # inputs of unequal size: GPTQ's case
    samples = rng.standard_normal((512, k), dtype=np.float32) * scale
    gptq = qjit.Linear.quantize(exact_context, w, bits=3, group_size=32, method="gptq", calibration=samples,
                                act_order=act_order)
    assert gptq.info.act_order == act_order
    rtn = qjit.Linear.quantize(exact_context, w, bits=3, group_size=32)
    output_error = {name: np.linalg.norm(samples @ (layer.dequantize() - w.T)) for name, layer in
                    (("gptq", gptq), ("rtn", rtn))}
    assert output_error["gptq"] < output_error["rtn"]
    calibration = qjit.Calibration(k).add(samples[:256]).add(samples[256:])
    assert calibration.rows == 512
    same = qjit.Linear.quantize(exact_context, w, bits=3, group_size=32, method="gptq", calibration=calibration,
                                act_order=act_order)
    np.testing.assert_allclose(same.dequantize(), gptq.dequantize(), atol=1e-6)


def test_milo_over_gptq_and_mixed_within_a_budget(exact_context, rng):
    k, n = 128, 48
    w = rng.standard_normal((n, k), dtype=np.float32)
    samples = rng.standard_normal((512, k), dtype=np.float32) * np.linspace(0.1, 3.0, k, dtype=np.float32)
    gptq = qjit.Linear.quantize(exact_context, w, bits=3, group_size=32, method="gptq", calibration=samples)
    milo = qjit.Linear.quantize(exact_context, w, bits=3, group_size=32, method="milo", calibration=samples,
                                rank=8, milo_base="gptq")
    assert milo.info.low_rank == 8
    output_error = {name: np.linalg.norm(samples @ (layer.dequantize() - w.T)) for name, layer in
                    (("gptq", gptq), ("milo", milo))}
    assert output_error["milo"] < output_error["gptq"]
    with pytest.raises(qjit.InvalidArgumentError, match="milo_base is 'awq'"):
        qjit.Linear.quantize(exact_context, w, method="milo", rank=4, milo_base="awq")
    # This small layer stores 2.85 bits per weight with every group in 2 bits (outliers' row index
    # included), and each 4-bit group adds 0.5.
    mixed = qjit.Linear.quantize(exact_context, w, group_size=32, method="mixed", calibration=samples,
                                 mixed_bits_per_weight=3.5)
    assert mixed.info.bits_per_weight <= 3.5 and mixed.info.wide_groups == 1


def test_gptq_without_a_calibration_is_refused(exact_context, rng):
    with pytest.raises(qjit.InvalidArgumentError, match="calibration"):
        qjit.Linear.quantize(exact_context, rng.standard_normal((8, 64), dtype=np.float32), group_size=32,
                             method="gptq")


def test_unknown_options_and_names_are_refused(exact_context, rng):
    w = rng.standard_normal((8, 64), dtype=np.float32)
    with pytest.raises(TypeError, match="ranks"):
        qjit.Linear.quantize(exact_context, w, ranks=3)
    with pytest.raises(qjit.InvalidArgumentError, match="method is 'awq'"):
        qjit.Linear.quantize(exact_context, w, method="awq")
    with pytest.raises(qjit.InvalidArgumentError, match="bits"):
        qjit.Linear.quantize(exact_context, w, bits=7)
    with pytest.raises(qjit.InvalidArgumentError, match="group"):
        qjit.Linear.quantize(exact_context, w, group_size=48)


def test_save_and_load_round_trip(exact_context, rng, tmp_path):
    layer = qjit.Linear.quantize(exact_context, rng.standard_normal((72, 200), dtype=np.float32), bits=3,
                                 group_size=64, method="milo", rank=4)
    path = tmp_path / "layer.qjit"
    layer.save(path)
    loaded = qjit.Linear.load(exact_context, path)
    np.testing.assert_array_equal(loaded.dequantize(), layer.dequantize())
    assert loaded.info == layer.info
    x = rng.standard_normal((3, 200), dtype=np.float32)
    np.testing.assert_array_equal(loaded(x), layer(x))


def test_damaged_and_missing_files_are_reported(exact_context, rng, tmp_path):
    layer = qjit.Linear.quantize(exact_context, rng.standard_normal((72, 200), dtype=np.float32), group_size=64)
    path = tmp_path / "layer.qjit"
    layer.save(path)
    data = path.read_bytes()
    (tmp_path / "truncated.qjit").write_bytes(data[: len(data) // 2])
    with pytest.raises(qjit.CorruptDataError) as error:
        qjit.Linear.load(exact_context, tmp_path / "truncated.qjit")
    assert "truncated.qjit" in str(error.value)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x40
    (tmp_path / "flipped.qjit").write_bytes(bytes(flipped))
    with pytest.raises(qjit.CorruptDataError):
        qjit.Linear.load(exact_context, tmp_path / "flipped.qjit")
    with pytest.raises(qjit.FileIOError, match="no-such-file"):
        qjit.Linear.load(exact_context, tmp_path / "no-such-file.qjit")
    assert isinstance(qjit.FileIOError("x"), OSError)


def test_a_failed_save_leaves_the_existing_file(exact_context, rng, tmp_path):
    layer = qjit.Linear.quantize(exact_context, rng.standard_normal((72, 200), dtype=np.float32), group_size=64)
    with pytest.raises(qjit.FileIOError):
        layer.save(tmp_path / "no-such-directory" / "layer.qjit")
    path = tmp_path / "layer.qjit"
    path.write_bytes(b"kept")
    (tmp_path / "blocked").mkdir()
    with pytest.raises(qjit.FileIOError):
        layer.save(tmp_path / "blocked")  # a directory cannot be replaced by the file
    assert path.read_bytes() == b"kept"


def test_info_and_description(exact_context, rng):
    layer = qjit.Linear.quantize(exact_context, rng.standard_normal((72, 200), dtype=np.float32), bits=4,
                                 group_size=64, symmetric=True)
    info = layer.info
    assert (info.k, info.n, info.bits, info.group_size, info.symmetric, info.act_order) == (200, 72, 4, 64, True, False)
    # 4-bit codes, one fp16 scale per group of 64 rows and column (4 groups: 200 rows), no zero points.
    assert info.stored_bytes == 200 * 72 // 2 + 4 * 72 * 2
    assert 4.0 < info.bits_per_weight < 4.5
    assert "K=200" in layer.describe() and "N=72" in layer.describe()
    assert layer.tuning.source in ("model", "portable")  # tuning_budget_ms=0: the model's pick, untimed


def test_tuning_goes_into_the_database_and_is_found_again(rng, tmp_path):
    database = tmp_path / "tuning.yaml"
    w = rng.standard_normal((96, 256), dtype=np.float32)
    first = qjit.Linear.quantize(qjit.Context(tuning_db=database, tuning_budget_ms=30), w, group_size=128)
    if first.tuning.source == "portable":
        pytest.skip("no generated kernels on this machine: nothing is tuned")
    assert first.tuning.source == "searched" and first.tuning.candidates_timed > 0
    assert database.exists()
    again = qjit.Context(tuning_db=database, tuning_budget_ms=30)
    second = qjit.Linear.quantize(again, w, group_size=128)
    assert second.tuning.source == "database" and second.tuning.tiling == first.tuning.tiling
    assert first.tuning.kernel_key.split()[0] in again.tuning_records()
    exported = tmp_path / "exported.yaml"
    again.export_tuning(exported)
    fresh = qjit.Context(tuning_db=tmp_path / "other.yaml", tuning_budget_ms=30)
    fresh.import_tuning(exported)
    assert qjit.Linear.quantize(fresh, w, group_size=128).tuning.source == "database"


def test_a_layer_keeps_its_context_alive(rng):
    context = qjit.Context(activations="f32", tuning_db="", tuning_budget_ms=0)
    layer = qjit.Linear.quantize(context, rng.standard_normal((40, 96), dtype=np.float32), group_size=32)
    x = rng.standard_normal((2, 96), dtype=np.float32)
    expected = layer(x)
    del context
    gc.collect()
    np.testing.assert_array_equal(layer(x), expected)  # the context lives as long as its layers


def test_forwards_from_several_threads(exact_context, rng):
    layer = qjit.Linear.quantize(exact_context, rng.standard_normal((300, 512), dtype=np.float32), group_size=128)
    inputs = [rng.standard_normal((4, 512), dtype=np.float32) for _ in range(8)]
    expected = [layer(x) for x in inputs]
    results = [None] * len(inputs)

    def run(i):
        for _ in range(20):
            results[i] = layer(inputs[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for got, want in zip(results, expected):
        np.testing.assert_array_equal(got, want)


def test_benchmark_times_the_c_call(exact_context, rng):
    layer = qjit.Linear.quantize(exact_context, rng.standard_normal((64, 64), dtype=np.float32), group_size=32)
    assert layer.benchmark(m=2, repeats=5) > 0
    with pytest.raises(qjit.InvalidArgumentError):
        layer.benchmark(m=0)
