"""One way through the code: no import circle, one preset rule at every entry, a rule's refusals before
anything runs, and one rule contract."""
import ast
import dataclasses
from pathlib import Path

import pytest

import dico.__main__ as cli
from dico.lanes import parse_lanes
from dico.methods import RULES, admit
from dico.rules import Rule
from dico.settings import METHODS, SETTINGS, Settings, settings_for, specs

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dico", "dico_ui", "visuals")


# ------------------------------------------------------------------------------------------------ import circles

def modules() -> dict[str, Path]:
    found = {"app": ROOT / "app.py"}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict) -> set[str]:
    """Every project module ``name`` imports, wherever the import stands (top level, a function, a branch)."""
    def owner(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {owner(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else owner(base) for a in node.names}
    return out - {None, name}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_round_a_circle_not_even_from_inside_a_function():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    assert circles(graph) == []


def test_the_circle_finder_finds_a_circle_hidden_in_a_function():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    src = "def f():\n    from dico.loop import drive\n"
    path = ROOT / "dico" / "constraints.py"
    assert "dico.loop" in imports("dico.constraints", type("P", (), {"read_text": lambda self: src,
                                                                      "name": path.name})(), modules())


# ------------------------------------------------------------------------------------------------ one preset rule

PRESET_FIELDS = [(method, switch, name, value) for method, cls in SETTINGS.items()
                 for switch, preset in cls.presets.items() for name, value in preset.items()]


def other_value(spec, *avoid):
    """A valid value of ``spec`` that is none of ``avoid``."""
    if spec.type is bool:
        candidates = [True, False]
    elif spec.choices:
        candidates = list(spec.choices)
    else:
        lo, hi = spec.range
        candidates = [spec.type(lo + (hi - lo) * f) for f in (0.25, 0.5, 0.75, 1.0)] + [spec.type(hi)]
    return next((v for v in candidates if v not in avoid), None)


def through_every_entry(method: str, given: dict) -> dict[str, Settings]:
    """The same settings given explicitly through every entry a user has."""
    cls = SETTINGS[method]
    switched = cls(**{k: v for k, v in given.items() if k in cls.presets})
    rest = {k: v for k, v in given.items() if k not in cls.presets}
    (lane,) = parse_lanes([{"method": method, "settings": given}])
    (shared,) = parse_lanes([method], {method: given})
    args = cli.build_parser().parse_args(["generate", "--prompt", "x", "--method", method] + [
        a for k, v in given.items() for a in ((f"--{k.replace('_', '-')}" if v else f"--no-{k.replace('_', '-')}",)
                                              if isinstance(v, bool) else (f"--{k.replace('_', '-')}", str(v)))])
    return {"direct": cls(**given), "from_dict": cls.from_dict(given), "settings_for": settings_for(method, given),
            "replace": dataclasses.replace(switched, **rest), "a lane's own settings (API, page)": lane.settings,
            "a method's settings (API)": shared.settings,
            "the CLI": admit(method, "non-ar", cli.given_settings(args)).settings}


@pytest.mark.parametrize("method,switch,name,preset_value", PRESET_FIELDS,
                         ids=[f"{m}.{s}.{n}" for m, s, n, _ in PRESET_FIELDS])
def test_every_entry_agrees_a_value_given_explicitly_wins_over_its_preset(method, switch, name, preset_value):
    spec = {s.name: s for s in specs(SETTINGS[method])}[name]
    for value in {spec.default, other_value(spec, spec.default, preset_value)} - {None, preset_value}:
        got = through_every_entry(method, {switch: True, name: value})
        assert {entry: getattr(s, name) for entry, s in got.items()} == {entry: value for entry in got}
    left_out = through_every_entry(method, {switch: True})
    assert {entry: getattr(s, name) for entry, s in left_out.items()} == {entry: preset_value for entry in left_out}


@pytest.mark.parametrize("method,switch,name,preset_value", PRESET_FIELDS,
                         ids=[f"{m}.{s}.{n}" for m, s, n, _ in PRESET_FIELDS])
def test_replace_keeps_what_was_given_and_a_switch_turned_on_by_replace_fills_its_preset(method, switch, name,
                                                                                       preset_value):
    cls = SETTINGS[method]
    spec = {s.name: s for s in specs(cls)}[name]
    given = cls.from_dict({switch: True, name: spec.default})
    unrelated = next(s for s in specs(cls) if s.name not in cls.presets[switch] and s.name != switch)
    moved = dataclasses.replace(given, **{unrelated.name: other_value(unrelated, unrelated.default)})
    assert getattr(moved, name) == spec.default and getattr(moved, switch)
    assert dataclasses.replace(cls(), **{switch: True}) == cls(**{switch: True})
    assert getattr(dataclasses.replace(cls(), **{switch: True}), name) == preset_value


def test_the_page_form_counts_a_control_left_at_its_default_as_not_given():
    """The page shows every setting and cannot tell a value left alone from one typed: with a switch on, a control
    at its default is filled by the preset; one changed wins (``dico.settings.given_in_form``)."""
    from dico.settings import AUTHORS_CODE, DiCoSettings, given_in_form
    form = {s.name: s.default for s in specs(DiCoSettings)} | {"authors_code": True, "tau1": 0.4}
    assert given_in_form(DiCoSettings, form) == {"authors_code": True, "tau1": 0.4}
    made = settings_for("dico", given_in_form(DiCoSettings, form))
    assert made.tau1 == 0.4 and made.seeds == AUTHORS_CODE["seeds"]


def test_settings_write_and_compare_only_their_settings():
    from dico.settings import DiCoSettings
    assert "_given" not in DiCoSettings().to_dict() and "_given" not in {s.name for s in specs(DiCoSettings)}
    assert DiCoSettings(tau1=0.3) == DiCoSettings()            # given or not, the same values are the same settings
    with pytest.raises(ValueError, match="_given: not a setting of 'dico'"):
        settings_for("dico", {"_given": ()})


# ------------------------------------------------------------------------------------- the rule contract, refusals

def test_every_rule_keeps_the_one_contract_and_declares_only_refusals_the_request_knows():
    from dico.methods import ASKED
    for method in METHODS:
        rule = admit(method, "non-ar")
        assert isinstance(rule, Rule) and type(rule).choose is not Rule.choose
        assert set(rule.cannot) <= set(ASKED), method
    assert set(RULES) == set(METHODS)


@pytest.mark.parametrize("settings,capture,field", [({"cache": "dual"}, False, "cache"),
                                                    ({"cfg_scale": 1.0}, False, "cfg_scale"),
                                                    ({}, True, "capture_attention")])
def test_what_a_rule_cannot_do_is_refused_by_admit_naming_the_field(settings, capture, field):
    with pytest.raises(ValueError, match=rf"^{field}: WINO cannot run with it \("):
        admit("wino", "non-ar", settings, 96, 96, capture_attention=capture)
    admit("fast", "non-ar", settings, 96, 96, capture_attention=capture)       # the others can


def test_the_loop_and_a_switch_of_rule_refuse_through_admit(predictor):
    from dico.loop import Decoding
    with pytest.raises(ValueError, match=r"^cache: WINO cannot run with it"):
        Decoding(predictor, "Take the numbers 4, 9, 2. Add 3 to each number.", "wino", gen_length=16,
                 settings={"cache": "dual"})
    run = Decoding(predictor, "Take the numbers 4, 9, 2. Add 3 to each number.", "fast", gen_length=16)
    with pytest.raises(ValueError, match=r"^cfg_scale: WINO cannot run with it"):
        run.switch_rule("wino", {"cfg_scale": 1.0})


def test_the_cli_refuses_what_a_rule_cannot_do_before_loading_a_model(capsys, monkeypatch):
    import dico.models
    monkeypatch.setattr(dico.models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    assert cli.main(["generate", "--prompt", "Add 3 to 4.", "--method", "wino", "--cache", "dual"]) == 2
    assert capsys.readouterr().err.startswith("error: cache: WINO cannot run with it")


@pytest.mark.parametrize("batched", [False, True], ids=["decode", "batch"])
def test_the_loop_asks_a_rule_only_for_the_parts_the_contract_declares(batched):
    """The loop and the batch driver read a rule's declared parts (``Rule``), nothing it might happen to have: every
    attribute they ask a rule for is one ``Rule`` declares."""
    import dico
    from dico.rules import Choice, top1
    from standins import RULE_PROMPT, random_predictor

    declared = {name for klass in Rule.__mro__ for name in vars(klass)} | {"settings"}
    asked = set()

    class Watched(Rule):
        def __init__(self):
            self.settings = settings_for("vanilla")

        def __getattribute__(self, name):
            if not name.startswith("__"):
                asked.add(name)
            return object.__getattribute__(self, name)

        def choose(self, s):
            return Choice(top1(s.conf, s.candidates()), "vanilla")

    import dico.loop
    original = dico.loop.admit
    dico.loop.admit = lambda *a, **k: Watched()
    try:
        predictor = random_predictor()
        if batched:
            dico.generate_batch(predictor, [RULE_PROMPT, RULE_PROMPT + " w5"], "vanilla", gen_length=6)
        else:
            dico.generate(predictor, RULE_PROMPT, "vanilla", mode="semi-ar", gen_length=6, block_length=3)
    finally:
        dico.loop.admit = original
    assert asked and asked <= declared, f"asked for undeclared parts: {sorted(asked - declared)}"


@pytest.mark.parametrize("method, settings", [("klass", {"confidence": 1.0}),
                                              ("prophet", {"early": 1000, "mid": 1000, "late": 1000})])
def test_rules_that_fall_back_on_llada_s_schedule_commit_what_vanilla_commits_with_the_same_steps(method, settings):
    """KLASS with nothing ready and Prophet without its early exit are LLaDA's schedule (the one ``Schedule``): the
    same positions a pass as Vanilla with the same steps, blocks and model."""
    import dico
    from standins import RULE_PROMPT, random_predictor

    def commits(method, **extra):
        trace = dico.generate(random_predictor(), RULE_PROMPT, method, mode="semi-ar", gen_length=12, block_length=6,
                              steps=4, **extra)
        return [s.committed for s in trace.steps]

    vanilla = commits("vanilla")
    assert [len(c) for c in vanilla] == [3, 3, 3, 3]
    assert commits(method, **settings) == vanilla


def test_a_request_asking_a_lane_for_what_its_rule_cannot_do_is_refused_at_the_parse_naming_the_lane():
    """WINO with a KV cache through ``/run`` and the page: refused while the request is parsed (the page keeps what
    it shows), not after the page is cleared."""
    pytest.importorskip("gradio")
    from dico_ui.request import api_request
    with pytest.raises(ValueError, match=r"^methods\[1\] \(WINO\): cache: WINO cannot run with it"):
        api_request("Add 3 to 4.", "dico-tiny", "non-ar", 96, 32, ["fast", "wino"], {"wino": {"cache": "dual"}},
                    False)
    with pytest.raises(ValueError, match=r"^methods\[0\] \(WINO \(cfg_scale=1\)\): cfg_scale: WINO cannot run with it"):
        api_request("Add 3 to 4.", "dico-tiny", "non-ar", 96, 32, [{"method": "wino", "settings": {"cfg_scale": 1}}],
                    {}, True)
