"""Expect tests: every error the registry loader reports, pinned with its full text.

Each message is ``FILE:LINE: OP: what is wrong``; FILE is the display path the caller passes
(``reg.yaml`` here), LINE the line of the key the error is about. All errors of a registry are
reported at once, in line order. The YAML is inline so the line numbers can be read off the test.
"""
# ruff: noqa: E501 - pinned messages stay whole, so a grep for one finds its test
from __future__ import annotations

import pytest

from codegen.parse import RegistryError, load_registry, parse_registry
from codegen.yaml_loader import DuplicateKeyError, load

OK = """\
- func: good(Tensor x) -> Tensor
  kernel: Good
  outputs: {result0: {like: x}}
"""


def errors_of(text: str, path: str = "reg.yaml") -> list[str]:
    with pytest.raises(RegistryError) as info:
        parse_registry(text, path)
    assert str(info.value) == "\n".join(info.value.errors)
    return info.value.errors


def test_the_base_entry_is_valid() -> None:
    registry = parse_registry(OK, "reg.yaml")
    assert [op.name for op in registry.ops] == ["good"]


CASES = [
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  outputs: {result0: {like: x}}
  restrict: {x: 1}
""", [
        "reg.yaml:4: f: unknown key 'restrict'; known keys: autocast, autograd, bad_calls, checks, doc, dtypes, func, kernel, outputs, python, random, reference, samples, sharding, strided, tags, torch, vmap; see docs/registry.md#entry-keys",
    ], id="unknown_entry_key"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  checks:
    - expr: x.dim() == 2
      error: "x must be 2D"
      hint: "reshape"
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:6: f: unknown check key 'hint'; known: arg, enum, equals, error, expr, let, range, strict, torch, values, warn, when; see docs/registry.md#checks",
    ], id="unknown_check_key"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  outputs:
    result0: {like: x, layout: strided}
""", [
        "reg.yaml:4: f: outputs: result0: unknown key 'layout'; known: dtype, like, shape, value; see docs/registry.md#outputs",
    ], id="unknown_output_key"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  outputs: {result0: {like: x}}
  autograd:
    backward: f_grad
    save: [x]
- func: f_grad(Tensor grad, Tensor x) -> Tensor
  kernel: FGrad
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:5: f: autograd: no source for f_grad argument 'grad'; name it under autograd.inputs",
        "reg.yaml:6: f: unknown autograd key 'save'; known: backward, forward_overrides, grads, inputs, non_differentiable; see docs/registry.md#autograd",
    ], id="unknown_autograd_key"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  outputs: {result0: {like: x}}
  python: {name: g}
""", [
        "reg.yaml:4: f: unknown python key 'name'; known: returns; see docs/registry.md#python",
    ], id="unknown_python_key"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  outputs: {result0: {like: x}}
  kernel: G
""", [
        "reg.yaml:4: f: duplicate key 'kernel'",
    ], id="duplicate_entry_key"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  func: g(Tensor x) -> Tensor
  kernel: F
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:2: f: duplicate key 'func'",
    ], id="duplicate_func_key"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  outputs:
    result0: {like: x}
    result0: {like: x}
""", [
        "reg.yaml:5: f: duplicate key 'result0'",
    ], id="duplicate_nested_key"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  checks:
    - expr: x.dim() == 2
      error: "x must be 2D"
      expr: x.dim() == 3
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:6: f: duplicate key 'expr'",
    ], id="duplicate_check_key"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: [F
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:3: invalid YAML: expected ',' or ']', but got ':'",
    ], id="invalid_yaml"),
    pytest.param("""\
func: f(Tensor x) -> Tensor
""", [
        'reg.yaml:1: the registry must be a list of op entries',
    ], id="not_a_list"),
    pytest.param(OK + """\
- just a string
""", [
        "reg.yaml:4: an entry must be a mapping with 'func:' (or 'enum:'), got 'just a string'",
    ], id="entry_not_mapping"),
    pytest.param("""\
- kernel: F
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:1: every entry needs a 'func:' schema string",
    ], id="missing_func"),
    pytest.param("""\
- func: f(Tensor x -> Tensor
  kernel: F
""", [
        "reg.yaml:1: f: cannot parse schema 'f(Tensor x -> Tensor': Invalid function schema: f(Tensor x -> Tensor",
    ], id="unparsable_schema"),
    pytest.param("""\
- func: f(Tensorx) -> Tensor
  kernel: F
""", [
        "reg.yaml:1: f: cannot parse schema 'f(Tensorx) -> Tensor': illegal argument 'Tensorx'",
    ], id="illegal_argument"),
    pytest.param("""\
- func: f.out2(Tensor x) -> Tensor
  kernel: F
""", [
        'reg.yaml:1: f.out2: overload names are not supported (f.out2); give the op its own name',
    ], id="overload"),
    pytest.param("""\
- func: f(Tensor x, int x) -> Tensor
  kernel: F
""", [
        'reg.yaml:1: f: argument names must be unique, x repeats',
    ], id="duplicate_arg"),
    pytest.param("""\
- func: f(Tensor(a) x) -> Tensor(a)
  kernel: F
""", [
        'reg.yaml:1: f: alias annotations (Tensor(a), Tensor(a!)) are not supported; ops are functional',
    ], id="alias"),
    pytest.param("""\
- func: f(Tensor x) -> ()
  kernel: F
""", [
        'reg.yaml:1: f: an op must return at least one Tensor',
    ], id="no_returns"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:1: f: 'kernel:' must name the kernel (a C++ identifier, e.g. FlashAttnGrad)",
    ], id="missing_kernel"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: My-Kernel
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:2: f: 'kernel:' must name the kernel (a C++ identifier, e.g. FlashAttnGrad)",
    ], id="invalid_kernel"),
    pytest.param("""\
- func: f(Tensor x, Tensor[] xs, Scalar s) -> Tensor
  kernel: F
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:1: f: argument 'xs': argument type Tensor[] is not supported by op_plugin's codegen",
        "reg.yaml:1: f: argument 's': argument type Scalar is not supported by op_plugin's codegen",
    ], id="unsupported_arg_type"),
    pytest.param("""\
- func: f(Tensor x) -> (Tensor, int)
  kernel: F
  outputs: {result0: {like: x}}
- func: g(Tensor x, float p) -> (int n, Tensor y)
  kernel: G
  outputs: {n: {value: x.numel()}, y: {like: x}}
- func: g2(Tensor x) -> (Tensor y, float z)
  kernel: G2
  outputs: {y: {like: x}}
- func: h(Tensor x, float p) -> (Tensor y, int n, int m)
  kernel: H
  random: {when: p}
  outputs: {y: {value: "1"}, n: {like: x}, m: {value: p}}
- func: k(Tensor x) -> (Tensor y, int n)
  kernel: K
  random: [p]
  checks:
    - {expr: x.dim() == data_dependent(), error: "no"}
  outputs: {y: {like: x}, n: {value: data_dependent()}}
""", [
        "reg.yaml:3: f: outputs: no shape rule for return 'result1'",
        "reg.yaml:4: g: int returns must follow the Tensor returns (at least one Tensor)",
        "reg.yaml:7: g2: returns must be Tensor or int, but got Tensor, float",
        "reg.yaml:9: g2: outputs: no shape rule for return 'z'",
        "reg.yaml:12: h: random.when must be a condition, but it is float",
        "reg.yaml:13: h: outputs: y: an int return takes only 'value:' (what the fake returns) and only int returns take it",
        "reg.yaml:13: h: outputs: n: an int return takes only 'value:' (what the fake returns) and only int returns take it",
        "reg.yaml:13: h: outputs: m: value must be an int, but it is float",
        "reg.yaml:16: k: 'random:' takes only 'when: <condition under which the kernel draws random numbers>'",
        "reg.yaml:18: k: data_dependent() is only for the value of an int output",
    ], id="int_returns_and_random"),

    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  checks:
    - expr: x.dim() == D
      error: "x must be {D}D"
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:4: f: in expression 'x.dim() == D': unknown name 'D' (not an argument, let, or dtype); see docs/registry.md#expressions",
    ], id="unknown_name"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  checks:
    - expr: abs(x.dim()) == 2
      error: "x must be 2D"
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:4: f: in expression 'abs(x.dim()) == 2': unknown function 'abs'; known: ['data_dependent', 'isfinite', 'len', 'max', 'min', 'stats_dtype', 'upper', 'varlen_batches', 'varlen_numels']; see docs/registry.md#expressions",
    ], id="unknown_function"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  checks:
    - expr: x.stride(0) == 1
      error: "x must be contiguous"
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:4: f: in expression 'x.stride(0) == 1': unsupported method .stride() of a Tensor; see docs/registry.md#expressions",
    ], id="unknown_method"),
    pytest.param("""\
- func: f(Tensor x, int n) -> Tensor
  kernel: F
  checks:
    - expr: x.device == n
      error: "bad"
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:4: f: in expression 'x.device == n': unsupported attribute .device of a Tensor; see docs/registry.md#expressions",
    ], id="unknown_attribute"),
    pytest.param("""\
- func: f(Tensor x, str layout, int n, int? w=None) -> Tensor
  kernel: F
  checks:
    - expr: x.dim() == layout
      error: "a"
    - expr: n and x.dim() == 2
      error: "b"
    - expr: x.dim() + layout == 2
      error: "c"
    - expr: n is None
      error: "d"
    - expr: layout < 'B'
      error: "e"
    - expr: 1 < n < 3
      error: "f"
    - expr: x.dim()
      error: "g"
    - expr: "n if n > 0 else layout"
      error: "h"
    - expr: x.size(n, 0) == 1
      error: "i"
    - expr: n in ()
      error: "j"
    - expr: x[0] == 1
      error: "k"
    - expr: "x.dim() ==="
      error: "l"
    - expr: x.dim() == 2
      error: "bad {x.dim():>3}"
    - expr: x.dim() == 2
      error: "bad {x.dim()"
    - expr: x.dim() == 2
      error: "bad {nope}"
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:4: f: in expression 'x.dim() == layout': cannot compare int with str",
        "reg.yaml:6: f: in expression 'n and x.dim() == 2': expected bool, got int in 'n'",
        "reg.yaml:8: f: in expression 'x.dim() + layout == 2': arithmetic needs numbers",
        "reg.yaml:10: f: in expression 'n is None': 'is None' / 'is not None' apply to optional arguments only",
        'reg.yaml:12: f: in expression "layout < \'B\'": str values compare with == and != only',
        "reg.yaml:14: f: in expression '1 < n < 3': chained comparisons are not supported; use 'and'",
        "reg.yaml:16: f: check 'x.dim()' must be a condition (bool), but it is int",
        "reg.yaml:18: f: in expression 'n if n > 0 else layout': both branches of a conditional need one type, got int and str",
        "reg.yaml:20: f: in expression 'x.size(n, 0) == 1': .size() takes 1 argument(s)",
        "reg.yaml:22: f: in expression 'n in ()': 'in' needs a literal tuple of values",
        "reg.yaml:24: f: in expression 'x[0] == 1': only shapes and int lists index and slice, not a Tensor ('x')",
        "reg.yaml:26: f: cannot parse expression 'x.dim() ===': invalid syntax",
        'reg.yaml:29: f: format specs are not supported in error text: {x.dim()}',
        "reg.yaml:31: f: bad placeholder in error text 'bad {x.dim()': expected '}' before end of string",
        "reg.yaml:33: f: in expression 'nope': unknown name 'nope' (not an argument, let, or dtype); see docs/registry.md#expressions",
    ], id="type_errors"),
    pytest.param("""\
- func: f(Tensor x, int[] size, int n, float s) -> Tensor
  kernel: F
  checks:
    - {expr: "x.shape[::2] == size", error: "a"}
    - {expr: "x.shape[0, 1] == n", error: "b"}
    - {expr: "n[0] == 1", error: "c"}
    - {expr: "len(x.shape + 1) == 2", error: "d"}
    - {expr: "x.shape[s] == 1", error: "e"}
    - {expr: "x.shape * 2 == size", error: "f"}
    - {expr: "x.shape[:-1] < size", error: "g"}
    - {expr: "x.shape[1:] == n", error: "h"}
    - {expr: "len(n) == 1", error: "i"}
    - {expr: "{x.shape: 1} == n", error: "j"}
    - {expr: "x.shape[:-1 == size", error: "k"}
  outputs:
    result0: {shape: "x.shape[-1]", dtype: x}
""", [
        "reg.yaml:4: f: in expression 'x.shape[::2] == size': slices take no step (x.shape[a:b], either end may be "
        "left out)",
        "reg.yaml:5: f: in expression 'x.shape[0, 1] == n': a shape takes one index or one slice",
        "reg.yaml:6: f: in expression 'n[0] == 1': only shapes and int lists index and slice, not a int ('n')",
        "reg.yaml:7: f: in expression 'len(x.shape + 1) == 2': a shape takes only + with another shape or int list, "
        "got shape and int",
        "reg.yaml:8: f: in expression 'x.shape[s] == 1': expected int, got float in 's'",
        "reg.yaml:9: f: in expression 'x.shape * 2 == size': a shape takes only + with another shape or int list, "
        "got shape and int",
        "reg.yaml:10: f: in expression 'x.shape[:-1] < size': shape values compare with == and != only",
        "reg.yaml:11: f: in expression 'x.shape[1:] == n': cannot compare shape with int",
        "reg.yaml:12: f: in expression 'len(n) == 1': wrong arguments for len(): int",
        "reg.yaml:13: f: in expression '{x.shape: 1} == n': unsupported syntax Dict ('{x.shape: 1}'); see "
        "docs/registry.md#expressions",
        "reg.yaml:14: f: cannot parse expression 'x.shape[:-1 == size': '[' was never closed",
        "reg.yaml:16: f: outputs: result0: shape 'x.shape[-1]' must be a shape ([d0, d1, ...], x.shape, "
        "x.shape[:-1] + [1], an int[] argument), but it is int",
    ], id="shape_errors"),
    pytest.param("""\
- func: f(Tensor x, int n, str layout) -> Tensor
  kernel: F
  checks:
    - x.dim() == 2
    - {expr: x.dim() == 2}
    - {expr: x.dim() == 2, arg: n, values: [1], error: "e"}
    - {arg: n}
    - {arg: m, values: [1]}
    - {arg: n, values: []}
    - {arg: n, range: [1]}
    - {arg: n, values: [1], range: [0, 2]}
    - {arg: n, values: [1], strict: yes please}
    - {arg: n, values: [1], when: n + 1}
    - {arg: layout, values: [bsnd, TND]}
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:4: f: a check must be a mapping, got 'x.dim() == 2'",
        "reg.yaml:5: f: an 'expr:' check needs an 'error:' text",
        "reg.yaml:6: f: a check has either 'expr:' or 'arg:' with one of values/range/equals/enum",
        "reg.yaml:7: f: a check needs 'expr:' and 'error:', or 'arg:' with exactly one of values/range/equals/enum",
        "reg.yaml:8: f: check names unknown argument or let 'm'",
        "reg.yaml:9: f: 'values:' must be a non-empty list",
        "reg.yaml:10: f: 'range:' must be [low, high] (null for unbounded)",
        "reg.yaml:11: f: a check needs 'expr:' and 'error:', or 'arg:' with exactly one of values/range/equals/enum",
        "reg.yaml:12: f: 'strict:' must be true or false",
        "reg.yaml:13: f: 'when:' must be a condition (bool), but it is int",
        "reg.yaml:14: f: values of str argument 'layout' are compared with upper(layout), so they must be upper-case strings: 'bsnd'",
    ], id="malformed_checks"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  checks: {expr: x.dim() == 2}
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:3: f: 'checks:' must be a list",
    ], id="checks_not_a_list"),
    pytest.param("""\
- func: f(Tensor x, int n) -> Tensor
  kernel: F
  checks:
    - let: [T]
    - {let: {T: x.size(0)}, error: "e"}
    - let: {n: x.size(0)}
    - let:
        T: x.size(0)
        float16: x.size(1)
        len: x.size(1)
        lambda: 1
        D: x.size(
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:4: f: 'let:' must be a mapping of names to expressions, alone in its item",
        "reg.yaml:5: f: 'let:' must be a mapping of names to expressions, alone in its item",
        "reg.yaml:6: f: let 'n' clashes with an argument, let, dtype or function name",
        "reg.yaml:9: f: let 'float16' clashes with an argument, let, dtype or function name",
        "reg.yaml:10: f: let 'len' clashes with an argument, let, dtype or function name",
        "reg.yaml:11: f: let 'lambda' is not a name",
        "reg.yaml:12: f: cannot parse expression 'x.size(': '(' was never closed",
    ], id="malformed_lets"),
    pytest.param("""\
- func: f(Tensor x, int n) -> (Tensor a, Tensor b, Tensor c, Tensor d, Tensor e, Tensor f)
  kernel: F
  outputs:
    a: {like: n}
    b: {shape: "[n]"}
    c: {shape: n, dtype: x}
    d: {shape: "[n]", dtype: n}
    e: like x
    f: {shape: [n, 2], dtype: float32}
    g: {like: x}
""", [
        "reg.yaml:4: f: outputs: a: 'like: n' does not name a tensor argument",
        "reg.yaml:5: f: outputs: b needs both 'shape:' and 'dtype:' (or 'like:')",
        "reg.yaml:6: f: outputs: c: shape 'n' must be a shape ([d0, d1, ...], x.shape, x.shape[:-1] + [1], "
        "an int[] argument), but it is int",
        "reg.yaml:7: f: outputs: d: dtype 'n' must be a dtype, a tensor argument or stats_dtype(x), but it is int",
        "reg.yaml:8: f: outputs: e takes 'like: ARG' or 'shape:' and 'dtype:', got 'like x'",
        "reg.yaml:10: f: outputs: 'g' is not a return of the schema (a, b, c, d, e, f)",
    ], id="malformed_outputs"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  outputs: [x]
""", [
        "reg.yaml:3: f: 'outputs:' must map each returned tensor to its shape and dtype",
    ], id="outputs_not_a_mapping"),
    pytest.param("""\
- func: f(Tensor x) -> (Tensor a, Tensor b)
  kernel: F
  outputs:
    a: {like: x}
""", [
        "reg.yaml:3: f: outputs: no shape rule for return 'b'",
    ], id="missing_output_rules"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
""", [
        "reg.yaml:1: f: outputs: no shape rule for return 'result0'",
    ], id="no_outputs_key"),
    pytest.param("""\
- func: f(Tensor x, Tensor? y, int n) -> Tensor
  kernel: F
  dtypes:
    x: [float32, complex64]
    y: float32
    n: [int64]
    z: [float32]
  outputs: {result0: {like: x}}
""", [
        'reg.yaml:4: f: dtypes: x must list dtypes from float16, bfloat16, float32, float64, int8, uint8, int32, int64, bool_',
        'reg.yaml:5: f: dtypes: y must list dtypes from float16, bfloat16, float32, float64, int8, uint8, int32, int64, bool_',
        "reg.yaml:6: f: dtypes: 'n' is not a tensor argument",
        "reg.yaml:7: f: dtypes: 'z' is not a tensor argument",
    ], id="malformed_dtypes"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  dtypes: [float32]
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:3: f: 'dtypes:' must map tensor arguments to lists of dtypes",
    ], id="dtypes_not_a_mapping"),
    pytest.param("""\
- func: f(Tensor x) -> (Tensor a, Tensor b)
  kernel: F
  outputs: {a: {like: x}, b: {like: x}}
  python:
    returns: [c]
""", [
        "reg.yaml:5: f: python.returns must list some of a, b, got ['c']",
    ], id="malformed_python"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  outputs: {result0: {like: x}}
  python: [result0]
""", [
        "reg.yaml:4: f: 'python:' takes only 'returns: [outputs the wrapper returns]'",
    ], id="python_not_mapping"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  outputs: {result0: {like: x}}
  python: {returns: []}
""", [
        'reg.yaml:4: f: python.returns must list some of result0, got []',
    ], id="python_empty_returns"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  outputs: {result0: {like: x}}
  tags: [core]
  doc: [not, text]
""", [
        "reg.yaml:4: f: 'tags:' must be a list of ['needs_fixed_stride_order', 'nondeterministic_seeded', 'pt2_compliant_tag']",
        "reg.yaml:5: f: 'doc:' must be text",
    ], id="malformed_tags_doc"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  outputs: {result0: {like: x}}
  autograd: f_grad
- func: g(Tensor x) -> Tensor
  kernel: G
  outputs: {result0: {like: x}}
  autograd:
    grads: {x: grad_x}
- func: h(Tensor x) -> Tensor
  kernel: H
  outputs: {result0: {like: x}}
  autograd:
    backward: f
    inputs: [x]
""", [
        "reg.yaml:4: f: 'autograd:' must be a mapping",
        "reg.yaml:8: g: autograd needs 'backward: <op name>'",
        'reg.yaml:13: h: autograd: inputs and grads are mappings, non_differentiable a list',
    ], id="malformed_autograd"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  outputs: {result0: {like: x}}
  autograd:
    backward: f_backward
""", [
        "reg.yaml:5: f: autograd: backward op 'f_backward' is not in the registry",
    ], id="unknown_backward_op"),
    pytest.param("""\
- func: f(Tensor x, int n) -> (Tensor y, Tensor aux)
  kernel: F
  outputs: {y: {like: x}, aux: {like: x}}
  autograd:
    backward: f_grad
    inputs:
      grad_y: grad(z)
      nope: x
      saved: w
      count: y
    grads: {x: grad_x, q: grad_x, n: grad_x, y: grad_q}
    non_differentiable: [aux, zz]
- func: f_grad(Tensor grad_y, Tensor x, Tensor saved, int count, Tensor missing, int k=1) -> Tensor grad_x
  kernel: FGrad
  outputs: {grad_x: {like: x}}
""", [
        "reg.yaml:6: f: autograd: no source for f_grad argument 'missing'; name it under autograd.inputs",
        'reg.yaml:7: f: autograd.inputs: grad(z) names no output of f',
        "reg.yaml:8: f: autograd.inputs: 'nope' is not an argument of f_grad",
        "reg.yaml:9: f: autograd.inputs: 'w' is neither an input nor an output of f",
        "reg.yaml:10: f: autograd: f_grad argument 'count' is a int, but its source output 'y' is a Tensor",
        "reg.yaml:11: f: autograd.grads: 'q' is not an input of f",
        "reg.yaml:11: f: autograd.grads: 'n' is a int, not a tensor input",
        "reg.yaml:11: f: autograd.grads: 'y' is not an input of f",
        "reg.yaml:11: f: autograd.grads: 'grad_q' is not an output of f_grad",
        "reg.yaml:12: f: autograd.non_differentiable: 'zz' is not an output of f",
    ], id="autograd_cross_errors"),
    pytest.param("""\
- func: f(Tensor x, Tensor? b=None, int n=0, bool full=False) -> (Tensor y, Tensor aux)
  kernel: F
  outputs: {y: {like: x}, aux: {like: x}}
  autograd:
    backward: f_grad
    inputs: {grad_y: grad(y)}
    grads:
      x: grad_x
      b: bias_grad(grad(y), x, nope, grad(zz))
      n: count_grad(x)
      aux: 1 + f(x)
    forward_overrides: {full: 1, missing: true, n: 2.5}
- func: f_grad(Tensor grad_y, Tensor x) -> Tensor grad_x
  kernel: FGrad
  outputs: {grad_x: {like: x}}
""", [
        "reg.yaml:9: f: autograd.grads: b: 'nope' is neither an input nor an output of f",
        "reg.yaml:9: f: autograd.grads: grad(zz) names no output of f",
        "reg.yaml:10: f: autograd.grads: 'n' is not a tensor input of f",
        "reg.yaml:11: f: autograd.grads: aux: '1 + f(x)' is neither a backward output nor a call "
        "f(name, grad(output), ...) of csrc/bindings/autograd_formulas.h",
        "reg.yaml:12: f: autograd.forward_overrides: 'full' is a bool, but 1 is not",
        "reg.yaml:12: f: autograd.forward_overrides: 'missing' is not an argument of f",
        "reg.yaml:12: f: autograd.forward_overrides: 'n' is a int, but 2.5 is not",
    ], id="autograd_formula_and_override_errors"),
    pytest.param("""\
- func: f(Tensor x) -> Tensor
  kernel: F
  checks:
    - {expr: x.dim() == 2, warn: true, strict: true, error: "a"}
    - {expr: x.dim() == 2, warn: 1, error: "b"}
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:4: f: 'warn:' must be true or false, and a warning is never strict",
        "reg.yaml:5: f: 'warn:' must be true or false, and a warning is never strict",
    ], id="warn_checks"),
    pytest.param("""\
- enum: Mode
  members: {A: 0, B: 3}
- enum: Mode
  members: {C: 1}
- enum: lower
  members: {A: 0}
- enum: Bad
  members: {a: 0}
- enum: Twice
  members: {A: 1, B: 1}
  color: red
- func: f(Tensor x, int m=0, float s=1.0, int? o=None) -> Tensor
  kernel: F
  checks:
    - {arg: m, enum: Nope}
    - {arg: s, enum: Mode}
    - {arg: m, enum: Mode, values: [0, 3]}
    - {arg: m, enum: Mode}
    - {arg: m, enum: Mode}
    - {arg: o, enum: Mode}
  outputs: {result0: {like: x}}
""", [
        "reg.yaml:3: enum Mode is defined twice (first at line 1)",
        "reg.yaml:5: 'enum:' must name the enum class (a CamelCase identifier), got 'lower'",
        "reg.yaml:8: enum Bad: members are UPPER_CASE names with int values, not 'a'",
        "reg.yaml:10: enum Twice: two members have the same value",
        "reg.yaml:11: enum Twice: unknown key 'color'; known: doc, enum, members; see docs/registry.md#enums",
        "reg.yaml:15: f: enum 'Nope' is not defined (a '- enum: Nope' item with its members)",
        "reg.yaml:16: f: enum: 's' is a float; an enum names the values of an int argument",
        "reg.yaml:17: f: a check needs 'expr:' and 'error:', or 'arg:' with exactly one of values/range/equals/enum",
        "reg.yaml:19: f: m already takes enum Mode",
    ], id="enums"),
    pytest.param("""\
- func: f(Tensor x, Tensor? m=None, int n=1) -> (Tensor y, Tensor z, int k)
  kernel: F
  outputs: {y: {like: x}, z: {like: x}, k: {value: "1"}}
  vmap:
    when: n
    inputs: {x: 0, n: 0, m: x.dtype}
    outputs: {y: "0 if n == 1 else None"}
    replays: {when: n > 1}
    fold: true
""", [
        "reg.yaml:5: f: vmap.when must be a condition, but it is int",
        "reg.yaml:6: f: vmap.inputs: 'n' is not a tensor argument of f (x, m)",
        "reg.yaml:6: f: vmap.inputs.m must be an int axis, None, or `AXIS if COND else None`, but it is dtype",
        "reg.yaml:7: f: vmap.outputs: no axis for z (write None for an output every sample has alike)",
        "reg.yaml:8: f: vmap.replays takes {when: <condition>, of: <the tensor argument a forward that drew the random numbers made>}; see docs/registry.md#vmap",
        "reg.yaml:9: f: vmap: unknown key 'fold'; known: inputs, outputs, replays, when; see docs/registry.md#vmap",
    ], id="vmap"),
    pytest.param("""\
- func: f(Tensor x, Tensor m, int n=1) -> Tensor
  kernel: F
  dtypes: {m: [bool_, uint8]}
  outputs: {result0: {like: x}}
  autocast: {policy: bf16, inputs: [x, n, m, x], cast: true}
- func: g(Tensor x) -> Tensor
  kernel: G
  outputs: {result0: {like: x}}
  autocast: [x]
- func: h(Tensor x) -> Tensor
  kernel: H
  outputs: {result0: {like: x}}
  autocast: {policy: fp32}
""", [
        "reg.yaml:5: f: autocast: unknown key 'cast'; known: inputs, policy; see docs/registry.md#autocast",
        "reg.yaml:5: f: autocast.policy must be one of lower_precision_fp, fp32, promote, but got 'bf16'",
        "reg.yaml:5: f: autocast.inputs: 'n' is not a tensor argument of f (x, m)",
        "reg.yaml:5: f: autocast.inputs: m takes no floating dtype (bool_, uint8), and autocast casts floating tensors only",
        "reg.yaml:5: f: autocast.inputs names a tensor twice",
        "reg.yaml:9: g: 'autocast:' takes {policy: lower_precision_fp | fp32 | promote, inputs: [tensor arguments]}; see docs/registry.md#autocast",
        "reg.yaml:13: h: autocast.inputs must list the tensor arguments autocast casts; see docs/registry.md#autocast",
    ], id="autocast"),
    pytest.param("""\
- func: f(Tensor x, Tensor m, int n=1) -> (Tensor y, Tensor z)
  kernel: F
  outputs: {y: {like: x}, z: {like: x}}
  sharding:
    rows: {when: n, inputs: {x: 0, n: 0}, outputs: {y: 0}, reduce: sum}
    cols: {inputs: {m: x.dtype}, outputs: {y: partial, z: "0 if n == 1 else None"}}
    both: {inputs: {}, outputs: {y: 0, z: None}}
    1st: {inputs: {x: 0}, outputs: {y: 0, z: 0}}
- func: g(Tensor x) -> Tensor
  kernel: G
  outputs: {result0: {like: x}}
  sharding: [x]
""", [
        "reg.yaml:5: f: sharding.rows: unknown key 'reduce'; known: inputs, outputs, when; see docs/registry.md#sharding",
        "reg.yaml:5: f: sharding.rows.when must be a condition, but it is int",
        "reg.yaml:5: f: sharding.rows.inputs: 'n' is not a tensor argument of f (x, m)",
        "reg.yaml:6: f: sharding.cols.inputs.m must be an int axis, None, or `AXIS if COND else None`, but it is dtype",
        "reg.yaml:7: f: sharding.both.inputs: no tensor is split (every op already runs with every tensor whole on each rank)",
        "reg.yaml:8: f: sharding.1st: a strategy is `NAME: {when, inputs, outputs}` (NAME an identifier); see docs/registry.md#sharding",
        "reg.yaml:12: g: 'sharding:' maps each strategy's name to {when, inputs, outputs}; see docs/registry.md#sharding",
    ], id="sharding"),
    pytest.param("""\
- func: f(Tensor x, Tensor? m=None, int n=1) -> Tensor
  kernel: F
  outputs: {result0: {like: x}}
  strided: [x, n]
- func: g(Tensor x) -> Tensor
  kernel: G
  outputs: {result0: {like: x}}
  strided: x
""", [
        "reg.yaml:4: f: 'strided:' must list Tensor arguments of f (x, m), but got ['x', 'n']; see docs/registry.md#strided",
        "reg.yaml:8: g: 'strided:' must list Tensor arguments of g (x), but got 'x'; see docs/registry.md#strided",
    ], id="strided"),
    pytest.param(OK + """\
- func: other(Tensor x) -> Tensor
  kernel: Good
  outputs: {result0: {like: x}}
""" + OK.replace("Good", "Good2"), [
        'reg.yaml:4: other: kernel Good is already used by good (line 1)',
        'reg.yaml:7: good: duplicate op (first defined at line 1)',
    ], id="duplicate_op_and_kernel"),
    pytest.param("""\
- func: a(Tensor x) -> Tensor
  kernel: A
  outputs: {result0: {like: y}}
- func: b(Tensor x) -> Tensor
  kernel: B
  color: red
  outputs: {result0: {like: x}}
- func: c(Tensor x -> Tensor
- func: d(Tensor x) -> Tensor
  kernel: D
  checks:
    - {arg: x, values: [1]}
  outputs: {result0: {like: x}}
  kernel: D2
""", [
        "reg.yaml:3: a: outputs: result0: 'like: y' does not name a tensor argument",
        "reg.yaml:6: b: unknown key 'color'; known keys: autocast, autograd, bad_calls, checks, doc, dtypes, func, kernel, outputs, python, random, reference, samples, sharding, strided, tags, torch, vmap; see docs/registry.md#entry-keys",
        "reg.yaml:8: c: cannot parse schema 'c(Tensor x -> Tensor': Invalid function schema: c(Tensor x -> Tensor",
        "reg.yaml:12: d: values/range/equals apply to int, float, bool and str values; 'x' is a Tensor (write an 'expr:' check)",
        "reg.yaml:14: d: duplicate key 'kernel'",
    ], id="many_errors"),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_error_messages(text: str, expected: list[str]) -> None:
    assert errors_of(text) == expected


def test_all_errors_come_in_line_order() -> None:
    text = [p.values[0] for p in CASES if p.id == "many_errors"][0]
    errors = errors_of(text)
    lines = [int(m.split(":")[1]) for m in errors]
    assert lines == sorted(lines) and len(set(lines)) == 5
    assert [m.split(": ")[1] for m in errors] == ["a", "b", "c", "d", "d"]  # every entry, each op named


def test_the_display_path_names_the_file(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "my_ops.yaml"  # type: ignore[operator]
    path.write_text("- func: f(Tensor x) -> Tensor\n  outputs: {result0: {like: x}}\n")
    message = "f: 'kernel:' must name the kernel (a C++ identifier, e.g. FlashAttnGrad)"
    with pytest.raises(RegistryError) as info:
        load_registry(str(path), "op_plugin_functions.yaml")
    assert info.value.errors == [f"op_plugin_functions.yaml:1: {message}"]
    with pytest.raises(RegistryError) as info:
        load_registry(str(path))
    assert info.value.errors == [f"{path}:1: {message}"]


def test_an_empty_registry_has_no_ops() -> None:
    assert parse_registry("# nothing yet\n", "reg.yaml").ops == ()


def test_block_style_errors_name_the_line_of_their_key() -> None:
    text = """\
- func: f(Tensor x, int n) -> Tensor
  kernel: F
  checks:
    - arg: n
      range: [0, 8]
      when: x.dim() == 2
      error: "n must be in [0, 8], got {m}"
  outputs:
    result0:
      shape: x.shape
      dtype: float33
"""
    assert errors_of(text) == [
        "reg.yaml:7: f: in expression 'm': unknown name 'm' (not an argument, let, or dtype); see docs/registry.md#expressions",
        "reg.yaml:11: f: outputs: result0: in expression 'float33': unknown name 'float33' (not an argument, let, or dtype); see docs/registry.md#expressions",
    ]


def test_sugar_on_an_optional_value_checks_only_given_values() -> None:
    text = "- func: f(Tensor x, int? w=None) -> Tensor\n  kernel: F\n  checks:\n    - {arg: w, range: [1, 8]}\n" \
           "  outputs: {result0: {like: x}}\n"
    (check,) = parse_registry(text, "reg.yaml").ops[0].rules
    assert str(check.expr) == "w is None or (w >= 1 and w <= 8)"  # type: ignore[union-attr]


def test_yaml_loader_still_raises_on_duplicates_for_plain_loads() -> None:
    with pytest.raises(DuplicateKeyError) as info:
        load("a: 1\nb: 2\na: 3\n")
    assert (info.value.key, info.value.line) == ("a", 3)
    assert load("a: [1, 2]\n") == {"a": [1, 2], "__line__": 1, "__key_lines__": {"a": 1}}
