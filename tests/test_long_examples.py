"""The long worked answers on the page: examples that name the model and gen length they open on, replayed from
shipped traces, judged by the chain family's checker, with a lesson read from the committed Table 1 files."""
import json

import pytest

import dico
from dico.embedded import tasks
from dico.trace import bundle_json
from dico_ui import long_examples
from dico_ui.about import long_lesson
from dico_ui.render import judged_item

ITEM = tasks.make_split("chain", "test", 1)[0]


def test_a_chain_answer_is_judged_right_or_wrong_by_its_final_answer():
    item = judged_item(ITEM.prompt)
    assert item is not None and item.family == "chain"
    assert tasks.check(item, ITEM.answer)
    wrong = ITEM.answer.replace(f"Final answer: {ITEM.target}.", f"Final answer: {int(ITEM.target) + 1}.")
    assert wrong != ITEM.answer and not tasks.check(item, wrong)


def test_every_shipped_long_example_opens_on_its_model_and_length_from_its_own_traces():
    shipped = long_examples.long_examples()
    if not shipped:
        pytest.skip("no long example shipped in assets/examples.json (python -m dico_ui.examples --long 3)")
    for i, example in enumerate(shipped):
        assert example["model"] in dico.models.EMBEDDED_MODELS and example["gen_length"] == 256
        out = long_examples.opener(i)()
        traces = out["traces"]
        assert {t.model for t in traces} == {example["model"]} and {t.gen_length for t in traces} == {256}
        assert out["model"] == example["model"] and out["gen_length"] == 256 and out["mode"] == "non-ar"
        assert out["prompt"] == example["prompt"] and all(t.clash is not None for t in traces)
        assert out["model_note"].startswith(f"**{example['model']}** loads when you press Run")
        assert {t.method for t in traces} >= {"vanilla", "fast", "dico"}


def test_a_long_example_whose_traces_are_missing_is_said_on_the_page_and_changes_nothing(tmp_path, monkeypatch):
    examples = tmp_path / "examples.json"
    examples.write_text(json.dumps({"examples": [{"prompt": ITEM.prompt, "family": "chain", "target": ITEM.target,
                                                   "model": "dico-tiny-long", "gen_length": 256,
                                                   "trace": "assets/ui/no_such_file.json"}]}))
    monkeypatch.setattr(long_examples, "EXAMPLES", examples)
    out = long_examples.opener(0)()
    assert set(out) == {"status"} and "not shipped with this copy" in out["status"]


def test_the_lesson_says_dicos_passes_against_fast_dllms_from_the_table_files(tmp_path):
    def table(task, dico_nfe, fast_nfe, n):
        rows = [{"task": task, "mode": "non-ar", "label": label, "nfe_mean": nfe, "correct": n - 1, "n": n}
                for label, nfe in (("DiCo", dico_nfe), ("Fast-dLLM", fast_nfe))]
        rows.append({"task": task, "mode": "semi-ar", "label": "DiCo", "nfe_mean": 99.0, "correct": 0, "n": n})
        return rows

    long, short = tmp_path / "long.json", tmp_path / "short.json"
    long.write_text(json.dumps({"rows": table("chain", 20.0, 40.0, 100)}))
    short.write_text(json.dumps({"rows": table("word", 30.0, 20.0, 200) + table("pick", 5.0, 5.0, 200)}))
    said = long_lesson(long, short)
    assert "On 100 held-out long answers" in said and "20.0 passes, 0.50x Fast-dLLM's 40.0" in said
    assert "semi-AR" not in said                                    # no semi-AR Fast-dLLM row to set it against
    assert "word 1.50x, pick 1.00x Fast-dLLM's" in said
    assert long_lesson(tmp_path / "none.json", tmp_path / "none.json") == ""


def test_the_shipped_bundles_replay_and_the_trajectory_figure_draws_the_three_runs_the_paper_draws(tmp_path):
    from visuals.export import file_figure

    predictor = dico.load_model("dico-tiny-long", attention=False)
    traces = [dico.generate(predictor, "Tom has 5 apples. He buys 3 more. How many apples does Tom have now?", m,
                            gen_length=32) for m in ("vanilla", "fast", "dico")]
    bundle = tmp_path / "bundle.json"
    bundle.write_text(bundle_json(traces))
    names = [t.name for t in traces]
    fig = file_figure(bundle, ",".join(reversed(names)))
    titles = [a.text for a in fig.layout.annotations if "steps" in (a.text or "")]
    assert [t.split(":")[0] for t in titles] == list(reversed(names))
    with pytest.raises(ValueError, match="lanes: no run named 'Nobody'"):
        file_figure(bundle, "Nobody")
