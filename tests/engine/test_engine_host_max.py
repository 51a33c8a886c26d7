"""`engine.attention.host_max`: the reduction answers as the builtin does, and only where it can."""

from __future__ import annotations

import builtins
import types

import pytest

torch = pytest.importorskip("torch")

from twinserve.engine.attention import host_max  # noqa: E402
from twinserve.engine.attention.host_max import install, tensor_max, uninstall  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.uint8, torch.bool])
def test_tensor_max_equals_the_builtin_on_integer_tensors(dtype):
    g = torch.Generator().manual_seed(0)
    for n in (1, 2, 33, 257):
        x = torch.randint(0, 2 if dtype == torch.bool else 100, (n,), generator=g).to(dtype)
        want = builtins.max(x)
        got = tensor_max(x)
        assert got.dim() == 0 and got.item() == want.item() and got.dtype == x.dtype
        assert got._base is None  # a reduction, not the builtin's view of an element
    d = torch.tensor([1, 3, 0, 3, 2], dtype=torch.int32)  # FlashInfer's use: lengths from an indptr
    assert tensor_max(d[1:] - d[:-1]).item() == builtins.max(d[1:] - d[:-1]).item() == 3


@pytest.mark.parametrize("args, kwargs", [
    ((3, 7, 5), {}),
    (([4, 9, 2],), {}),
    (([],), {"default": -1}),
    ((["a", "bbb", "cc"],), {"key": len}),
    ((torch.tensor([1.0, 5.0, 2.0]),), {}),  # floats: NaN rules differ, the builtin decides
])
def test_other_calls_go_to_the_builtin(args, kwargs):
    want = builtins.max(*args, **kwargs)
    got = tensor_max(*args, **kwargs)
    if isinstance(want, torch.Tensor):
        assert torch.equal(got, want) and got._base is not None  # the builtin's view
    else:
        assert got == want


def test_empty_and_2d_tensors_raise_as_the_builtin():
    with pytest.raises(ValueError):
        tensor_max(torch.zeros(0, dtype=torch.int32))
    with pytest.raises(RuntimeError):  # rows compared as tensors: ambiguous truth value
        tensor_max(torch.tensor([[1, 2], [3, 4]]))


def _package(own_max: bool = False) -> types.ModuleType:
    pkg = types.ModuleType("fakefi")
    for name in ("prefill", "decode"):
        mod = types.ModuleType(f"fakefi.{name}")
        exec("def longest(x):\n    return max(x)\n", mod.__dict__)
        if own_max and name == "decode":
            exec("def max(x):\n    return 'own'\n", mod.__dict__)
        setattr(pkg, name, mod)
    return pkg


def test_install_binds_the_reduction_where_the_modules_look_up_max():
    pkg = _package()
    x = torch.tensor([2, 9, 4], dtype=torch.int32)
    assert pkg.prefill.longest(x)._base is not None  # the builtin before
    assert install(pkg) == 2
    assert install(pkg) == 2  # idempotent
    for mod in (pkg.prefill, pkg.decode):
        r = mod.longest(x)
        assert r.item() == 9 and r._base is None
        assert mod.longest([1, 5]) == 5
    uninstall(pkg)
    assert "max" not in pkg.prefill.__dict__ and pkg.prefill.longest(x)._base is not None


def test_a_module_with_its_own_max_keeps_it():
    pkg = _package(own_max=True)
    assert install(pkg) == 1
    assert pkg.decode.longest(torch.tensor([1, 2])) == "own"
    uninstall(pkg)
    assert pkg.decode.longest(torch.tensor([1, 2])) == "own"


def test_missing_modules_are_skipped():
    pkg = types.ModuleType("empty")
    assert install(pkg) == 0
    uninstall(pkg)
    assert host_max.PLAN_MODULES == ("prefill", "decode")
