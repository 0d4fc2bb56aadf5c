"""The About text: ``assets/ui/about.md`` with the run's numbers filled in (where each method's parallelism
comes from) and the settings tables generated from the same Specs as the controls; and the lessons of a run in
words that it is made of: which lanes answered right, what a revising lane took back, what a fork changed (the
fork panel's status says that too)."""
from __future__ import annotations

import json
import string
from pathlib import Path

from dico.models import EMBEDDED_NAME
from dico.settings import NON_AR, SEMI_AR, settings_table
from dico.trace import BUNDLE_SCHEMA, Trace
from dico_ui import render
from dico_ui.request import CONTROLS, group_label
from dico_ui.text import EXAMPLES, clean, example_item, prose


def about_text(traces: list[Trace], outside: str = "") -> str:
    """assets/ui/about.md with the run's numbers filled in: where each method's parallelism comes from."""
    values = dict(bundle_schema=BUNDLE_SCHEMA, embedded=EMBEDDED_NAME, run="", numbers="", lessons="",
                  settings=settings_tables(), long_lesson=long_lesson())
    if traces:
        rows = [render.parallelism(t) for t in traces]
        values["run"] = "The numbers below are those of the run on screen: " + render.run_caption(traces[0]) + "."
        values["numbers"] = "\n".join(
            ["| lane | steps | answer complete at step | answer / padding tokens | answer tokens per step "
             "| tokens per step | largest step: answer + padding | steps that committed only padding |",
             "|---|---|---|---|---|---|---|---|"] +
            [f"| {r['label']} | {r['nfe']} | {r['answer_nfe'] or '—'} | {r['answer']} / {r['padding']} | "
             f"{r['answer_per_step'] or '—'} | {r['tokens_per_step']} | {r['biggest'][1]} + {r['biggest'][2]} | "
             f"{r['padding_only']} |" for r in rows])
        checked = judged(traces)
        revised = [revisions(t) for t in traces if t.remasks()] + [replacements(t) for t in traces if t.replaced()]
        forked = fork_story(traces)
        values["lessons"] = "\n".join(f"- {lesson(r)}" for r in rows) + (f"\n\n{checked}" if checked else "") + \
            "".join(f"\n\n{line}" for line in revised) + (f"\n\n{forked}" if forked else "") + \
            (f"\n\n⚠ {clean(outside)}" if outside else "")
    return string.Template(prose("about.md")).safe_substitute(values)


# ============================================================================ where DiCo gains on this stage

LONG_TABLE = EXAMPLES.parent.parent / "assets" / "bench" / "table1_gen256_dico-tiny-long.json"   # chain, dico-tiny-long
SHORT_TABLE = EXAMPLES.parent.parent / "assets" / "bench" / "table1_gen96.json"        # the short families, dico-tiny


def _passes(table: Path, mode: str = NON_AR) -> dict[str, dict[str, tuple[float, int, int]]]:
    """A Table 1 file's mean NFE, right answers and items by task and row label, in ``mode``."""
    try:
        rows = json.loads(table.read_text())["rows"]
    except (OSError, ValueError, KeyError):
        return {}
    found: dict = {}
    for row in rows:
        if row.get("mode") == mode:
            found.setdefault(row["task"], {})[row["label"]] = (row["nfe_mean"], row["correct"], row["n"])
    return found


def long_lesson(long_table: Path = LONG_TABLE, short_table: Path = SHORT_TABLE) -> str:
    """Where on this stage DiCo saves passes against Fast-dLLM (long answers) and where it does not (short ones),
    from the committed Table 1 files, non-AR; "" when neither is shipped."""
    said = []
    chain = _passes(long_table).get("chain", {})
    if "DiCo" in chain and "Fast-dLLM" in chain:
        (dico, right, n), (fast, fast_right, _) = chain["DiCo"], chain["Fast-dLLM"]
        said.append(f"On {n} held-out long answers (gen 256, non-AR) DiCo took {dico:.1f} passes, "
                    f"{dico / fast:.2f}x Fast-dLLM's {fast:.1f} ({right} and {fast_right} of {n} right)")
        semi = _passes(long_table, SEMI_AR).get("chain", {})
        if "DiCo" in semi and "Fast-dLLM" in semi:
            (dico, right, n), (fast, fast_right, _) = semi["DiCo"], semi["Fast-dLLM"]
            said.append(f"in semi-AR blocks of 128 {dico:.1f} against {fast:.1f} ({right} and {fast_right} right)")
    short = _passes(short_table)
    ratios = [(task, rows["DiCo"][0] / rows["Fast-dLLM"][0]) for task, rows in short.items()
              if "DiCo" in rows and "Fast-dLLM" in rows]
    if ratios:
        shown = ", ".join(f"{task} {ratio:.2f}x" for task, ratio in ratios)
        said.append(f"on the short families at gen 96 (dico-tiny) DiCo's passes are {shown} Fast-dLLM's")
    return ("; ".join(said) + ". Divide and Conquer need a long answer to divide.") if said else ""



def judged(traces: list[Trace]) -> str:
    """Which lanes answered right, by the family's checker (a shipped example's, or the item read from the prompt):
    the lesson in words; nothing for a prompt the app cannot check (the race says so above the lanes)."""
    from dico.embedded import tasks

    if not traces or any(t.stopped for t in traces):
        return ""
    item = render.judged_item(traces[0].prompt)
    if item is None:
        return ""
    right = [t for t in traces if tasks.check(item, t.text)]
    wrong = [t for t in traces if t not in right]
    rule = ("any valid choice is right; the same thing twice, or pieces of two, is not"
            if item.family in ("pick", "team") else f"the final answer must be {item.target}")
    source = "a shipped" if example_item(traces[0].prompt) else "a"
    said = [f"This prompt is {source} {item.family} task, so every answer can be checked ({rule})."]
    if right:
        said.append("Right: " + ", ".join(f"**{clean(t.label)}** in {t.nfe} steps" for t in right) + ".")
    said += [f"**{clean(t.label)}** answered “{clean(t.text.strip())}”: wrong, in {t.nfe} steps." for t in wrong]
    return " ".join(said)


def taken_back(trace: Trace) -> list[tuple[int, int, int]]:
    """(step, position, token taken back) for every take-back of a revising run, in order."""
    tokens: dict[int, int] = {}
    out = []
    for step in trace.steps:
        tokens.update(zip(step.committed, step.tokens))
        tokens.update((p, new) for p, _, new in step.edited)
        out += [(step.index, p, tokens.pop(p)) for p in step.remasked if p in tokens]
    return out


def revisions(trace: Trace) -> str:
    """Which tokens a revising lane took back, which came back different inside the answer, and whether its answer
    is right (where the app can judge it): did revising repair anything?"""
    from dico.embedded import tasks

    taken = taken_back(trace)
    final = trace.response
    changed = sorted({(p, old) for _, p, old in taken if p < trace.answer_length and final[p] != old})
    said = [f"**{clean(trace.label)}** took back {len(taken)} token{'s' if len(taken) != 1 else ''} in "
            f"{len({k for k, _, _ in taken})} steps"]
    if changed:
        shown = ", ".join(f"`{clean(trace.token_text(old).strip())}` → `{clean(trace.token_text(final[p]).strip())}` "
                          f"at {p}" for p, old in changed[:6])
        said.append(f"; {len(changed)} answer position{'s' if len(changed) != 1 else ''} came back different "
                    f"({shown})")
    else:
        said.append("; every answer token it took back came back the same")
    item = render.judged_item(trace.prompt)
    if item is not None and not trace.stopped:
        right = tasks.check(item, trace.text)
        verdict = "so revising repaired it" if right and changed else "" if right else "not enough to repair it"
        said.append(f", and its answer is {'right' if right else 'wrong'}" + (f": {verdict}" if verdict else ""))
    return "".join(said) + "."


def replacements(trace: Trace) -> str:
    """What an editing lane (LLaDA 2.1) replaced: how many tokens, how many answer positions end on another token than
    their first commit, how many it changed more than once (back and forth), and whether its answer is right."""
    from dico.embedded import tasks

    first: dict[int, int] = {}
    times: dict[int, int] = {}
    for step in trace.steps:
        for p, t in zip(step.committed, step.tokens):
            first.setdefault(p, t)
        for p, _, _ in step.edited:
            times[p] = times.get(p, 0) + 1
    final = trace.response
    changed = sorted(p for p in times if p < trace.answer_length and final[p] != first.get(p))
    said = [f"**{clean(trace.label)}** replaced {trace.replaced()} written token{'s' if trace.replaced() != 1 else ''}"
            f" in {sum(1 for s in trace.steps if s.edited)} steps"]
    again = sum(1 for n in times.values() if n > 1)
    if again:
        said.append(f", {again} position{'s' if again != 1 else ''} more than once (back and forth)")
    if changed:
        word = lambda t: clean(trace.token_text(t).strip())      # noqa: E731
        shown = ", ".join(f"`{word(first[p])}` → `{word(final[p])}` at {p}" for p in changed[:6])
        said.append(f"; {len(changed)} answer position{'s' if len(changed) != 1 else ''} ended on another token than "
                    f"first written ({shown})")
    item = render.judged_item(trace.prompt)
    if item is not None and not trace.stopped:
        said.append(f", and its answer is {'right' if tasks.check(item, trace.text) else 'wrong'}")
    return "".join(said) + "."


def parent_of(fork: Trace, traces: list[Trace]) -> Trace | None:
    """The run on screen that ``fork`` forked (by its label), or None."""
    return next((t for t in traces if t is not fork and t.name == fork.fork["parent"]), None)


def _final(trace: Trace) -> list[int | None]:
    return trace.tokens_before(len(trace.steps))


def changed_positions(parent: Trace, fork: Trace) -> list[int]:
    """Response positions whose final token differs between the fork and its parent."""
    return [p for p, (a, b) in enumerate(zip(_final(parent), _final(fork))) if a != b]


def _edits(parent: Trace, fork: Trace) -> str:
    at, before = fork.fork["at"], parent.tokens_before(fork.fork["at"])
    said = [f"wrote ‘{clean(fork.token_text(t).strip())}’ at position {p}" +
            (f" (it held ‘{clean(parent.token_text(before[int(p)]).strip())}’)" if before[int(p)] is not None else "")
            for p, t in fork.fork.get("force", {}).items()]
    said += [f"took back ‘{clean(parent.token_text(before[p]).strip())}’ at position {p}"
             for p in fork.fork.get("remask", [])]
    return f"before step {at} it " + " and ".join(said)


def _answer(trace: Trace) -> str:
    from dico.embedded import tasks
    item = render.judged_item(trace.prompt)
    verdict = "" if item is None or trace.stopped else (" (right)" if tasks.check(item, trace.text) else " (wrong)")
    return f"“{clean(trace.text.strip())}”{verdict}"


def fork_story(traces: list[Trace]) -> str:
    """What each fork on screen changed, in words: its edit, which later commits differ from its parent's, and
    whether the answer changed (judged where the prompt can be checked)."""
    said = []
    for fork in (t for t in traces if t.fork is not None):
        parent = parent_of(fork, traces)
        if parent is None:
            said.append(f"**{clean(fork.name)}** is a fork of {clean(fork.fork['parent'])} at step {fork.fork['at']} "
                        "(its parent is not on screen).")
            continue
        moved = changed_positions(parent, fork)
        where = ", ".join(f"{p} (‘{clean(parent.token_text(_final(parent)[p]).strip())}’ → "
                          f"‘{clean(fork.token_text(_final(fork)[p]).strip())}’)" for p in moved[:8])
        differ = (f"it ends with {len(moved)} position(s) unlike its parent's: {where}" + ("…" if len(moved) > 8
                                                                                            else "")
                  if moved else "every position ends as in its parent")
        answer = (f"the answer changed from {_answer(parent)} to {_answer(fork)}" if fork.text != parent.text
                  else f"the answer stayed {_answer(fork)}")
        said.append(f"**{clean(fork.name)}**: {_edits(parent, fork)}; after that {differ} ({fork.nfe} steps against "
                    f"{parent.nfe}), and {answer}.")
    return " ".join(said)


def _word(trace: Trace, token: int) -> str:
    return f"‘{clean(trace.token_text(token).strip()) or '␣'}’"


def _replacement(run: Trace, k: int, pos: int, old: int, new: int) -> str:
    """One replacement of step ``k`` in words: when the replaced token was written, which neighbours (within two
    positions) were written after it, before the edit (what it was chosen without), and what replaced it."""
    wrote = max((i for i, s in enumerate(run.steps[:k]) if pos in s.committed or any(e[0] == pos for e in s.edited)),
                default=None)
    if wrote is None:                               # written before the first step (a constraint, a fork's edit)
        return f"replaced {_word(run, old)} at position {pos} with {_word(run, new)} in step {k}"
    later = {}
    for i in range(wrote + 1, k):
        step = run.steps[i]
        near = [f"{_word(run, t)} at {q}" for q, t in zip(step.committed, step.tokens) if 0 < abs(q - pos) <= 2]
        if near:
            later[i] = " and ".join(near)
    seen = (f", before its neighbours were written ({'; '.join(f'{w} in step {i}' for i, w in later.items())})"
            if later else "")
    return (f"wrote {_word(run, old)} at position {pos} in step {wrote}{seen}, and in step {k} replaced it with "
            f"{_word(run, new)}")


def edit_story(traces: list[Trace]) -> str:
    """What the first editing run on screen (LLaDA 2.1) replaced, in words: the tokens of its first step with
    replacements, when each was written and which neighbours were written after it, its answer, and the answer of a
    run of the same method that replaced nothing (the rule without edits) beside it, judged where the prompt can be
    checked."""
    run = next((t for t in traces if t.replaced()), None)
    if run is None:
        return ""
    k = next(i for i, s in enumerate(run.steps) if s.edited)
    shown = run.steps[k].edited[:3]
    more = run.replaced() - len(shown)
    said = [f"**{clean(run.name)}** " + "; ".join(_replacement(run, k, *e) for e in shown)
            + (f" ({more} more replacement{'s' if more != 1 else ''} after)" if more else "")
            + f": it answers {_answer(run)} in {run.nfe} steps."]
    plain = next((t for t in traces if t.method == run.method and not t.replaced()), None)
    if plain is not None:
        final = _final(plain)
        held = " and ".join(_word(plain, final[p]) for p, _, _ in shown if final[p] is not None)
        rule = ", ".join(f"{key} {value}" for key, value in plain.settings_given().items()
                         if isinstance(value, float))
        said.append(f"**{clean(plain.name)}** (the same rule{' at ' + rule if rule else ''}, which replaced nothing) "
                    f"{'keeps ' + held + ' there and ' if held else ''}answers {_answer(plain)}.")
    return " ".join(said)


def settings_tables() -> str:
    """The About text's settings: one table per group of generated controls (the shared sampling options once)."""
    groups: dict[str, list] = {}
    for group, spec in CONTROLS:
        groups.setdefault(group, []).append(spec)
    return "\n\n".join(f"**{group_label(group)}**\n\n" + settings_table(group_specs)
                       for group, group_specs in groups.items())


def lesson(r: dict) -> str:
    """Where one run's parallelism came from, in one sentence with its numbers."""
    if r["answer_nfe"] is None:
        return f"**{r['label']}** was {render.ended(r)} at step {r['nfe']}, before its answer was complete."
    head = (f"**{r['label']}** took {r['nfe']} steps and completed the answer ({r['answer']} tokens) at step "
            f"{r['answer_nfe']}: {r['answer_per_step']} answer tokens per step, {r['tokens_per_step']} tokens per "
            f"step counting the {r['padding']} padding positions.")
    phases = r["phases"]
    if r["method"] == "dico":
        parts = [f"{name} {a} answer + {p} padding in {n} steps" for name, (n, a, p) in phases.items()]
        return head + " By phase: " + "; ".join(parts) + "."
    if r["padding_only"]:
        return head + f" {r['padding_only']} of its steps committed only padding."
    return head
