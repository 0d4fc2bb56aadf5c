"""Training smoke test: a few steps of the real command on a tiny config, loaded back like a hub model."""
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def test_training_command_writes_a_model_that_loads_back(tmp_path):
    out = tmp_path / "tiny"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "dico.train", "--out", str(out), "--max-steps", "3",
                             "--batch-size", "4", "--hidden", "32", "--layers", "1", "--heads", "2",
                             "--max-gen", "64", "--threads", "1"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    for name in ("config.json", "model.safetensors", "tokenizer.json", "train_log.json"):
        assert (out / name).exists(), name
    log = json.loads((out / "train_log.json").read_text())
    assert log["step"] == 3 and log["command"].startswith("python -m dico.train")

    import dico
    predictor = dico.load_model(out)
    assert predictor.kind == "masked-lm" and predictor.mask_id == predictor.tokenizer.mask_token_id
    trace = dico.generate(predictor, "Tom has 5 apples. How many apples does Tom have now?", "dico", gen_length=16)
    assert trace.nfe >= 1 and all(not s.committed == [] for s in trace.steps)


def test_diffusion_loss_is_zero_where_nothing_is_masked_and_weights_by_one_over_t():
    from dico.train import diffusion_loss

    class Perfect(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            logits = torch.full((*input_ids.shape, 10), -30.0)
            logits.scatter_(-1, torch.tensor([[3, 4, 5, 6]]).expand_as(input_ids)[..., None], 30.0)
            return type("Out", (), {"logits": logits})

    ids = torch.tensor([[3, 4, 5, 6]])
    response = torch.tensor([[False, False, True, True]])
    loss = diffusion_loss(Perfect(), ids, torch.ones_like(ids), response, mask_id=9)
    assert loss.item() < 1e-6     # a model that always knows the answer has no loss, whatever is masked


def test_occurrence_mask_hides_one_candidate_and_all_its_later_mentions_in_the_answer_only():
    from dico.train import occurrence_mask

    # prompt 1 | answer 7 3 7 8 7 | end-of-text 5 5; candidates: the answer's 7s and its 3
    ids = torch.tensor([[1, 7, 3, 7, 8, 7, 5, 5]] * 200)
    answer = torch.tensor([[False, True, True, True, True, True, False, False]] * 200)
    candidates = answer & (ids != 8)
    masks = occurrence_mask(ids, candidates, answer, 1.0, torch.Generator().manual_seed(0))
    allowed = {(0, 1, 0, 1, 0, 1, 0, 0), (0, 0, 0, 1, 0, 1, 0, 0), (0, 0, 0, 0, 0, 1, 0, 0),
               (0, 0, 1, 0, 0, 0, 0, 0)}
    assert {tuple(row) for row in masks.int().tolist()} == allowed     # each start drawn, 8 never chosen
    assert not occurrence_mask(ids, candidates, answer, 0.0).any()
    assert not occurrence_mask(ids, torch.zeros_like(answer), answer, 1.0).any()


def test_content_positions_are_numbers_and_answer_words_that_stand_in_the_prompt():
    from dico.train import content_positions

    #        [CLS] Tom  has  5 [SEP] | Tom  gets  3  more  .  = | eot
    ids = torch.tensor([[2, 10, 11, 20, 3, 10, 12, 21, 13, 14, 15, 6]])
    response = torch.tensor([[False] * 5 + [True] * 7])
    answer = response & (ids != 6)
    number = torch.zeros(30, dtype=torch.bool)
    number[[20, 21]] = True
    word = torch.zeros(30, dtype=torch.bool)
    word[[10, 11, 12, 13]] = True
    got = content_positions(ids, answer, response, torch.ones_like(ids), number, word)
    assert got[0].nonzero().flatten().tolist() == [5, 7]      # "Tom" (in the prompt) and "3" (a number)


def test_extra_masked_positions_count_once_not_one_over_t():
    from dico.train import diffusion_loss

    class Uniform(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return type("Out", (), {"logits": torch.zeros(*input_ids.shape, 10)})

    ids = torch.tensor([[3, 4, 5, 6]] * 64)
    response = torch.tensor([[False, False, True, True]] * 64)
    extra = torch.tensor([[False, False, True, True]] * 64)      # everything masked by the extra rule
    loss = diffusion_loss(Uniform(), ids, torch.ones_like(ids), response, 9, torch.Generator().manual_seed(0),
                          extra=extra)
    per_token = torch.log(torch.tensor(10.0))                     # cross-entropy of a uniform guess over 10
    # a token masked at random (prob t) weighs 1/t, else 1 as an extra: expected weight E[2 - t] = 1.5;
    # weighing the extras 1/t too would give E[1/t] = ln(1000) = 6.9
    assert per_token <= loss <= 3 * per_token
