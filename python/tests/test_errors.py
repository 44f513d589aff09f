"""Errors: every qjit.Error class is raised by the library with its message; context options."""

from __future__ import annotations

import numpy as np
import pytest

import qjit


def test_each_status_has_its_class():
    for cls, base in ((qjit.InvalidArgumentError, ValueError), (qjit.OutOfMemoryError, MemoryError),
                      (qjit.FileIOError, OSError)):
        assert issubclass(cls, qjit.Error) and issubclass(cls, base)
    statuses = {cls.status for cls in (qjit.InvalidArgumentError, qjit.UnsupportedError, qjit.OutOfMemoryError,
                                       qjit.FileIOError, qjit.CorruptDataError, qjit.NoDeviceError,
                                       qjit.InternalError, qjit.CommunicationError)}
    assert statuses == set(range(1, 9))


def test_context_options_are_checked_by_name():
    with pytest.raises(qjit.InvalidArgumentError, match="max_isa is 'avx9'"):
        qjit.Context(max_isa="avx9")
    with pytest.raises(qjit.InvalidArgumentError, match="activations"):
        qjit.Context(activations="int4")
    with pytest.raises(qjit.InvalidArgumentError, match="num_threads is -3") as error:
        qjit.Context(threads=-3)
    assert error.value.status == 1 and error.value.message == str(error.value)
    forced = qjit.Context(tiling="tu=banana", tuning_db="")  # a tiling is checked against each layer's format
    with pytest.raises(qjit.InvalidArgumentError, match="tu='banana' is not an integer"):
        qjit.Linear.quantize(forced, np.ones((8, 64), np.float32), group_size=32)


def test_a_context_describes_its_machine():
    context = qjit.Context(threads=1, max_isa="portable", tuning_db="")
    assert context.threads == 1
    assert "portable" in context.describe()
    layer = qjit.Linear.quantize(context, np.ones((8, 64), np.float32), group_size=32)
    assert layer.tuning.source == "portable"


def test_an_allocation_too_large_is_out_of_memory():
    calibration = qjit.Calibration(200_000)  # H would take 200000^2 doubles: 320 GB
    with pytest.raises(qjit.OutOfMemoryError):
        calibration.add(np.ones((1, 200_000), np.float32))


def test_no_cuda_device_is_reported():
    try:
        count = qjit.cuda_device_count()
    except qjit.NoDeviceError as error:
        assert "CUDA" in str(error)
        with pytest.raises(qjit.NoDeviceError):
            qjit.Context(cuda_device=0)
    else:
        assert count >= 1
        assert qjit.cuda_device_info(0)["name"]
