"""The tree passes `ruff check` (pyproject.toml: pyflakes' findings, syntax errors): unused imports, names
used before they exist and dead assignments fail the unit tests, not a reader. The whole package (the
faces, the rooms node/, job/, fleet/, plan/, the seams slurm/ and gpu/) passes `mypy --strict`: both Slurm
backends are checked against SlurmApi."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STRICT = ("slurm_ft",)        # the whole package: faces, rooms, seams, data modules


def test_ruff_finds_nothing():
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", str(ROOT)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr


def test_mypy_strict_on_the_whole_package(tmp_path):
    p = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--cache-dir",
                        str(tmp_path), *STRICT], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_unit_tests_fake_slurm_is_a_slurm_api():
    # tests/unit/fakeslurm.py stands in for SlurmApi wherever a unit test needs Slurm: same methods, same parameters
    import inspect
    from fakeslurm import FakeSlurm
    from slurm_ft.slurm.api import SlurmApi
    members = [m for m in vars(SlurmApi) if not m.startswith("_") and callable(getattr(SlurmApi, m))]
    assert len(members) > 20
    for m in members:
        want = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(SlurmApi, m)).parameters.values()]
        got = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(FakeSlurm, m)).parameters.values()]
        assert got == want, m


def _imports(path: Path, package: dict, type_only: bool = False) -> set:
    """The package modules a file imports anywhere (function-level too); type-checking-only imports too
    when `type_only`."""
    import ast
    tree = ast.parse(path.read_text())
    skip = set() if type_only else {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                                    and "TYPE_CHECKING" in ast.dump(node.test) for n in ast.walk(node)}
    out = set()
    for n in ast.walk(tree):
        if id(n) in skip:
            continue
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("slurm_ft"):
            out |= {n.module} | {f"{n.module}.{a.name}" for a in n.names}
        elif isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
    return out & set(package)


def _cycles(type_only: bool) -> list:
    """The pairs of package modules that reach each other through imports."""
    package = {}
    for p in (ROOT / "slurm_ft").rglob("*.py"):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        package[name.removesuffix(".__init__")] = p
    graph = {m: _imports(p, package, type_only) - {m} for m, p in package.items()}

    def reaches(a: str, b: str) -> bool:
        seen, todo = set(), [a]
        while todo:
            x = todo.pop()
            if x == b:
                return True
            if x not in seen:
                seen.add(x)
                todo += graph[x]
        return False

    return sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if reaches(b, a)})


def test_no_import_cycles_of_any_kind():
    assert _cycles(type_only=False) == []
    # a helper typed by its caller's class is a cycle too: it names a Protocol of what it uses instead
    assert _cycles(type_only=True) == []


# Rooms by where the code runs (README, Layout). A room imports only the rooms below it: the controller host's
# fleet/ reads node/'s drain vocabulary (the check registry), job/'s tag and checkpoints and plan/'s arithmetic;
# node/ (every GPU node), job/ (inside the user's job) and plan/ (offline) import no other room, so the node
# never reaches the controller's journal. The seams, the data modules and the drain-rate breaker that node/ and
# fleet/ both ask (breaker/) import no room.
ROOMS = {"node": set(), "job": set(), "plan": set(), "fleet": {"node", "job", "plan"},
         "recovery": {"job"}}    # recovery/jobstart.py: the start code's old name, for already queued jobs
LOWER = ("slurm", "gpu", "config", "vocab", "finding", "errors", "fsutil", "runner", "heartbeat", "plugins", "promtext",
         "breaker")


def test_rooms_import_only_the_rooms_below_them():
    package = {}
    for p in (ROOT / "slurm_ft").rglob("*.py"):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        package[name.removesuffix(".__init__")] = p
    assert {m.split(".")[1] for m in package if m.count(".")} >= set(ROOMS) | {"cli", "slurm", "gpu"}
    wrong = []
    for m, p in package.items():
        room = m.split(".")[1] if m.count(".") else ""
        allowed = ROOMS.get(room, set() if room in LOWER else None)
        if allowed is None:
            continue                                     # the faces (cli/, __main__) may use every room
        for target in _imports(p, package) - {m}:
            other = target.split(".")[1] if target.count(".") else ""
            if other in ROOMS and other != room and other not in allowed:
                wrong.append(f"{m} -> {target}")
    assert not wrong, wrong


def test_every_import_inside_a_function_says_why_it_is_lazy():
    # An import belongs at the top of its module unless loading it later is the point (a hook's start-up, an
    # optional package such as torch, pynvml or pyslurm, a heavy stack a command's --help or sibling commands
    # need not pay for: cli/ loads each command's module lazily, group.py): such an import carries a
    # `# lazy: why` comment, on its line or the line above. The faces (cli/) too, and the lab.
    import ast
    unexplained = []
    files = list((ROOT / "slurm_ft").rglob("*.py")) + list((ROOT / "lab" / "slurm_ft_lab").rglob("*.py"))
    assert any(p.parent.name == "cli" for p in files)
    for p in files:
        rel = p.relative_to(ROOT)
        lines = p.read_text().splitlines()
        for f in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for n in ast.walk(f):
                if isinstance(n, (ast.Import, ast.ImportFrom)):
                    near = lines[n.lineno - 1] + (lines[n.lineno - 2] if n.lineno > 1 else "")
                    if "# lazy" not in near:
                        unexplained.append(f"{rel}:{n.lineno}: {lines[n.lineno - 1].strip()}")
    assert not unexplained, "\n".join(sorted(set(unexplained)))


def test_every_name_the_lab_benches_and_tests_import_from_the_product_exists():
    """The lab and the benches import the product's names, some inside functions (a scenario's starts log,
    read late): a name the product moves must fail here, not in a clean room's lab test."""
    import ast
    import importlib.util
    missing = []
    for folder in ("lab", "bench", "tests"):
        for p in (ROOT / folder).rglob("*.py"):
            for n in ast.walk(ast.parse(p.read_text())):
                if isinstance(n, ast.ImportFrom) and n.level == 0 and (n.module or "").split(".")[0] == "slurm_ft":
                    module = importlib.import_module(n.module)
                    missing += [f"{p.relative_to(ROOT)}:{n.lineno}: {n.module}.{a.name}" for a in n.names
                                if not hasattr(module, a.name) and not (hasattr(module, "__path__") and
                                                                        importlib.util.find_spec(f"{n.module}.{a.name}"))]
    assert not missing, "\n".join(missing)


def test_drain_reasons_are_written_and_read_in_vocab_alone():
    # Whether a reason can be resumed, rewritten or counted by the breaker depends on its writers and readers
    # agreeing: every form is rendered and parsed in slurm_ft/vocab.py (issue 26). Elsewhere: no reason head
    # (OWNER, REVALIDATE, ...) named, no string (docstrings and comments aside) spelling a form's head.
    import ast
    import re
    heads = {"OWNER", "REVALIDATE", "REVALIDATE_OUTAGE", "UNRESPONSIVE_QUARANTINE", "HANG_CHECK", "REWRITE_TAGS",
             "_FINDING_CODE", "_REASON_HEAD", "_PLANNED_RE"}
    form = re.compile(r"slurm-ft:(\\s|\s*(QUARANTINED|RMA|REBOOT|REVALIDATE|PLANNED|SIM|hang check|validation failed"
                      r"|quarantined,|held)\b|\s*\{)")
    wrong = []
    for p in (ROOT / "slurm_ft").rglob("*.py"):
        if p.name == "vocab.py" and p.parent.name == "slurm_ft":
            continue
        tree = ast.parse(p.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for n in ast.walk(tree):
            name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else \
                next((a.name for a in n.names if a.name in heads), None) if isinstance(n, ast.ImportFrom) else None
            if name in heads:
                wrong.append(f"{p.relative_to(ROOT)}:{n.lineno}: {name}")
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs and (
                    form.search(n.value) or "S?XID\\d+|" in n.value):     # the finding-code regex: a second parser
                wrong.append(f"{p.relative_to(ROOT)}:{n.lineno}: {n.value[:60]!r}")
    assert not wrong, "\n".join(sorted(set(wrong)))
