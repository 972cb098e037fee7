"""Cost per evaluation of the CEL implementations a route's expression filter could use (docs/benchmarks.md).

Each evaluates the same expressions, compiled once, against the same decoded JSON records and variables, the
way a stream's filter would: the variables handed over as Python values on every evaluation (their conversion is
part of the cost). Implementations not installed are skipped; only the one pyproject.toml names is installed by
the project, so compare the others in a scratch virtualenv:

    python3.11 -m venv /tmp/cel && /tmp/cel/bin/pip install cel-expr-python common-expression-language cel-python
    /tmp/cel/bin/python bench/cel_cost.py
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable
from typing import Any

EXPRESSIONS = {
    "comparison": "value.order.total > 100.0 && value.order.region == params.region",
    "guard attribute": "value.order.customer == guarded.jwt.attributes.customer",
    "list macro": 'value.order.items.exists(i, i.sku == "sku-3" && i.qty >= 2)',
}
RECORDS = [
    {"order": {"id": n, "total": 40.0 + n % 200, "region": "eu" if n % 2 else "us", "customer": f"c{n % 10}",
               "items": [{"sku": f"sku-{(n + j) % 7}", "qty": j + 1, "price": 9.5} for j in range(4)],
               "note": "x" * 200}}
    for n in range(1000)
]  # fmt: skip
PARAMS = {"region": "eu"}
GUARDED = {"jwt": {"identity": "alice", "attributes": {"customer": "c3"}}}
HEADERS = {"etag": "1"}


def variables(value: Any) -> dict[str, Any]:
    return {"value": value, "key": "k1", "headers": HEADERS, "params": PARAMS, "guarded": GUARDED}


def cel_expr_python(source: str) -> Callable[[Any], object]:
    cel = importlib.import_module("cel_expr_python.cel")
    env = cel.NewEnv(
        variables={
            "value": cel.Type.DYN,
            "key": cel.Type.DYN,
            "headers": cel.Type.Map(cel.Type.STRING, cel.Type.STRING),
            "params": cel.Type.Map(cel.Type.STRING, cel.Type.STRING),
            "guarded": cel.Type.Map(cel.Type.STRING, cel.Type.DYN),
        }
    )
    expression = env.compile(source)
    return lambda value: expression.eval(data=variables(value)).value()


def common_expression_language(source: str) -> Callable[[Any], object]:
    cel = importlib.import_module("cel")  # optional: not a dependency of the project
    program = cel.compile(source)
    return lambda value: program.execute(variables(value))


def cel_python(source: str) -> Callable[[Any], object]:
    celpy = importlib.import_module("celpy")  # optional: not a dependency of the project
    env = celpy.Environment()
    program = env.program(env.compile(source))
    return lambda value: program.evaluate(celpy.json_to_cel(variables(value)))


IMPLEMENTATIONS = {
    "cel-expr-python (C++)": cel_expr_python,
    "common-expression-language (Rust)": common_expression_language,
    "cel-python (pure Python)": cel_python,
}


def measure(evaluate: Callable[[Any], object], values: list[Any], rounds: int) -> float:
    """Best of `rounds` passes over `values`: microseconds per evaluation (CPU time of this process)."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for value in values:
            evaluate(value)
        best = min(best, (time.process_time() - start) / len(values))
    return best * 1e6


def main() -> None:
    values = [json.loads(json.dumps(record)) for record in RECORDS]
    print("| implementation | " + " | ".join(EXPRESSIONS) + " |")
    print("|---|" + "---:|" * len(EXPRESSIONS))
    for name, make in IMPLEMENTATIONS.items():
        cells = []
        for source in EXPRESSIONS.values():
            try:
                evaluate = make(source)
            except ImportError:
                cells.append("not installed")
                continue
            evaluate(values[0])  # warm up
            cells.append(f"{measure(evaluate, values, 5):.1f} µs")
        print(f"| {name} | " + " | ".join(cells) + " |")
    parse = measure(json.loads, [json.dumps(v).encode() for v in values], 5)
    print(f"\nFor scale: json.loads of the same values, {parse:.1f} µs each.")


if __name__ == "__main__":
    main()
