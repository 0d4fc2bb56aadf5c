"""EB-Sampler, KLASS, WINO and Saber decode as their published algorithms do (docs/decoding.md §7).

On the embedded model, greedy, gen 96 in non-AR and semi-AR (blocks of 32), ``dico.generate(..., method)`` commits,
with the same tokens, and takes back, at every step, what the plain-loop references of ``tests/reference_decoders.py``
commit and take back, with the same number of passes and the same final text. The references are written from the
published descriptions and, with the published conventions, commit what the published code itself commits on the
same logits (measured by tests/fidelity_run.py: assets/bench/fidelity.md); here they follow the project's
conventions (the mask token never predicted, float32 confidences, ties to the lower position), but for KLASS's and
WINO's float64, and Saber, whose defaults are its published code's (the mask token in the softmax, ties as its code's
``torch.topk`` takes them).
"""
from __future__ import annotations

import pytest
import torch

import dico
import reference_decoders as ref
from dico.embedded import tasks

torch.set_num_threads(1)

GEN_LENGTH, BLOCK_LENGTH = 96, 32
MODES = {"non-ar": GEN_LENGTH, "semi-ar": BLOCK_LENGTH}
# KLASS and WINO score in float64, as their code does (docs/decoding.md §7): the project's other conventions.
FLOAT64 = ref.Conventions(precision=True)
# Saber at its defaults is its published code (docs/decoding.md §7.4): the mask token in the softmax, and among exactly
# equal confidences what its code's torch.topk takes.
SABER_CODE = ref.Conventions(mask_token=True, torch_order=True)
REFERENCES = {"eb": ref.eb_sampler, "klass": lambda *a, **k: ref.klass(*a, published=FLOAT64, **k),
              "wino": lambda *a, **k: ref.wino(*a, published=FLOAT64, **k),
              "saber": lambda *a, **k: ref.saber(*a, published=SABER_CODE, **k)}
# The default run: one held-out item a method, each method on another family (the slow run: three of every family).
# WINO and Saber take tokens back on theirs, so the comparison covers the re-masks too.
QUICK = {"eb": ("pick", 0), "klass": ("list", 0), "wino": ("word", 0), "saber": ("list", 1)}


@pytest.fixture(scope="module")
def predictor():
    return dico.load_model()


def forward_of(predictor):
    def forward(ids, allowed=None, positions=None):
        return ref.bert_forward(predictor.model, ids, allowed, positions)
    return forward


def assert_decodes_as_reference(predictor, method: str, prompt: str, mode: str, reference=None, **settings):
    steps, response = (reference or REFERENCES[method])(forward_of(predictor), predictor.encode_prompt(prompt),
                                                        predictor.mask_id, GEN_LENGTH, MODES[mode])
    trace = dico.generate(predictor, prompt, method, mode=mode, gen_length=GEN_LENGTH, block_length=BLOCK_LENGTH,
                          **settings)
    for k, (got, want) in enumerate(zip(trace.steps, steps)):
        assert (got.committed, got.tokens, got.remasked) == (want["committed"], want["tokens"], want["remasked"]), \
            f"{method} {mode}: step {k} differs from the reference"
    assert trace.nfe == len(steps)
    assert trace.response == response
    assert trace.text == predictor.decode(response)
    assert not trace.limit_reached
    return trace


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("method", REFERENCES)
def test_each_method_commits_and_takes_back_what_its_reference_does(predictor, method, mode):
    family, index = QUICK[method]
    trace = assert_decodes_as_reference(predictor, method, tasks.make_split(family, "test")[index].prompt, mode)
    assert any(s.remasked for s in trace.steps) == (method in ("wino", "saber"))


def test_saber_without_its_published_softmax_is_the_projects_conventions(predictor):
    def project(*args):
        return ref.saber(*args, published=ref.Conventions(torch_order=True))
    assert_decodes_as_reference(predictor, "saber", tasks.make_split("list", "test")[1].prompt, "semi-ar", project,
                                published_code=False)


def test_klass_forgetting_its_history_at_each_block_is_the_dico_releases_port(predictor):
    def port(*args):
        return ref.klass(*args, port=True)
    assert_decodes_as_reference(predictor, "klass", tasks.make_split("word", "test")[0].prompt, "semi-ar", port,
                                reset_each_block=True)


# Three held-out items of every family a method, but two for Saber: it commits about one token a pass here (94 passes at
# gen 96), so each of its items already compares some 90 steps, and a third would add 30 s to CI for little more.
MATRIX = [pytest.param(method, mode, family, index, id=f"{method}-{mode}-{family}-{index}")
          for method in REFERENCES for mode in MODES for family in tasks.FAMILIES
          for index in range(2 if method == "saber" else 3)]


@pytest.mark.slow
@pytest.mark.parametrize("method, mode, family, index", MATRIX)
def test_each_method_follows_its_reference_on_held_out_items_of_every_family(predictor, method, mode, family, index):
    assert_decodes_as_reference(predictor, method, tasks.make_split(family, "test")[index].prompt, mode)


# ---------------------------------------------------------------------------------- the references' own model pass

def test_the_reference_pass_is_the_models_own_forward_with_a_full_mask(predictor):
    ids = torch.tensor([predictor.encode_prompt("Tom has 5 apples.") + [predictor.mask_id] * 12])
    l = ids.shape[1]
    plain = predictor.model(input_ids=ids).logits[0]
    by_hand = ref.bert_forward(predictor.model, ids, torch.ones(l, l, dtype=torch.bool), torch.arange(l))
    assert torch.allclose(by_hand, plain, atol=1e-5, rtol=0)


def test_a_mirror_slot_never_attends_to_the_position_it_mirrors_and_no_real_position_sees_the_mirror(predictor):
    prompt = predictor.encode_prompt("Tom has 5 apples. How many apples does Tom have?")
    m, n, w = len(prompt), 16, 8
    start, end = m + 8, m + 16                                             # the second block of 8
    positions, allowed = ref.mirrored_layout(m + n, start, end)
    length = m + n
    assert positions[length:].tolist() == list(range(start, end))          # mirror j at its position's id
    assert not allowed[:length, length:].any()                             # real queries: real keys only
    assert allowed[length:, length:].all()                                 # mirror queries see the whole mirror
    blind = ~allowed[length:, :length]
    assert blind.nonzero().tolist() == [[j, start + j] for j in range(w)]  # and every real key but their own
    # so the real positions' logits are the model's own, whatever the mirror holds (only deeper layers of a mirror
    # slot see its position's token, through the other real positions: WINO's design)
    ids = torch.tensor([prompt + [predictor.mask_id] * (n + w)])
    plain = predictor.model(input_ids=ids[:, :length]).logits[0]
    assert torch.allclose(ref.bert_forward(predictor.model, ids, allowed, positions)[:length], plain, atol=1e-5)
