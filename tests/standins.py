"""Stand-in mask predictors for the decoding tests: no weights, no network, every logit under the test's control.

- ``scripted(script, gen_length)``: a masked LM whose confidences (and predictions, margins) at each step
  come from a script, so a test can say "at step 2 position 5 has conf 0.7" and check exact positions.
  Equal scripted confidences are bitwise equal after the loop's softmax only where the logit rows are equal,
  i.e. the predictions too (another CPU sums differently laid-out rows in another order): a test that leans on
  a tie-break scripts one prediction for the tied positions; any other test keeps clear margins.
- ``RandomLM``: seeded random logits whose sharpness depends on how much is decoded (property tests).
- ``MarkerLM``: LLaDA- / Dream-sized vocabularies (126400 / 151700) whose raw ``logits[i]`` peak on token
  ``marker + i``, to check how ``MaskPredictor`` aligns them (Dream's shift by one, LLaDA in place).
- ``tiny_model_folder(path)``: a real, tiny ``BertForMaskedLM`` + ``dico.embedded.tokenizer.build_tokenizer`` saved
  like a hub model, for ``load_model`` and the command line.
- ``scores``, ``written``, ``with_signals``, ``rule``, ``run``, ``phases``: a rule's input by hand (masks only;
  written tokens; the loop's signals), a rule by its settings, a scripted decode (every forward pass must become a
  step) and its phases, for the rule tests.
- ``remote_model_folder(path, kind)``: a LLaDA- or Dream-shaped model folder with its own code
  (``tests/remote_standin.py``), its mask id in the config and a chat template, for ``trust_remote_code``.
- ``partial_cached_pass(predictor, decoding)``: a cached decode's pass between refreshes over an unchanged sequence.
"""
from __future__ import annotations

import math
import os
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import dico

# Where the model tests that compare a model with itself (cache against no cache, a batch against its rows) load
# it: the CPU, or a real GPU where there is one (``DICO_TEST_DEVICE=cuda``, tests/gpu_check.sh). float32 either way.
TEST_DEVICE = os.environ.get("DICO_TEST_DEVICE", "cpu")

VOCAB = 64
PAD_ID, UNK_ID, MASK_ID, EOS_ID = 0, 1, 4, 5
FIRST_WORD = 10                      # ids below are special tokens
LLADA_VOCAB, DREAM_VOCAB = 126400, 151700
LLADA_MASK_ID, DREAM_MASK_ID = 126336, 151666        # the released models' mask ids (their configs say so)


def token_at(position: int) -> int:
    """The token a scripted model predicts at a response position unless the script says otherwise."""
    return FIRST_WORD + position % (VOCAB - FIRST_WORD)


# ---------------------------------------------------------------------------- tokenizer

class FakeTokenizer:
    """Word-level: ``"w17"`` is id 17, other words hash into ids 10..999; ids decode to ``"w<id>"``."""

    def __init__(self, vocab_size: int = VOCAB, mask_id: int = MASK_ID, eos_id: int = EOS_ID):
        self.vocab_size, self.mask_token_id, self.eos_token_id = vocab_size, mask_id, eos_id
        self.unk_token_id, self.pad_token_id = UNK_ID, PAD_ID
        self.specials = {PAD_ID: "[PAD]", UNK_ID: "[UNK]", mask_id: "[MASK]", eos_id: "<|endoftext|>"}
        self.named = {text: i for i, text in self.specials.items()}

    def get_vocab(self) -> dict[str, int]:
        """The named tokens (a slow tokenizer's only view of its vocabulary; there is no ``.vocab``)."""
        return dict(self.named)

    def word_id(self, word: str) -> int:
        if word in self.named:
            return self.named[word]
        if re.fullmatch(r"w\d+", word) and int(word[1:]) < self.vocab_size:
            return int(word[1:])
        return FIRST_WORD + zlib.crc32(word.encode()) % (min(self.vocab_size, 1000) - FIRST_WORD)

    def __call__(self, text: str, add_special_tokens: bool = True, return_offsets_mapping: bool = False):
        spans = [m.span() for m in re.finditer(r"\S+", text)]
        out = {"input_ids": [self.word_id(text[a:b]) for a, b in spans]}
        if return_offsets_mapping:
            out["offset_mapping"] = spans
        return out

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, int):
            return self.specials.get(ids, f"w{ids}")
        return [self.convert_ids_to_tokens(int(i)) for i in ids]

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.word_id(token)

    def decode(self, ids, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool | None = None) -> str:
        ids = [int(i) for i in ids]
        if skip_special_tokens:
            ids = [i for i in ids if i not in self.specials]
        return " ".join(self.convert_ids_to_tokens(ids))


# ---------------------------------------------------------------------------- scripted logits

def scripted_logits(conf, pred, vocab: int = VOCAB, mask_id: int = MASK_ID, margin=None) -> torch.Tensor:
    """(n, vocab) float32 logits whose softmax max is exactly ``conf`` at token ``pred``.

    Without ``margin``: target logit log(c), every other token log((1 - c) / (V - 2)), the mask token -inf
    (the loop bans it anyway, so banning it here keeps the confidence exact). With ``margin`` (nan entries
    mean "don't care"): a runner-up token sits exactly ``margin`` below the target and the rest of the
    mass is spread over the other tokens, so both conf and margin are as scripted.
    """
    conf = torch.as_tensor(conf, dtype=torch.float64)
    pred = torch.as_tensor(pred, dtype=torch.long)
    n = conf.numel()
    if ((conf <= 0) | (conf >= 1)).any():
        raise ValueError(f"scripted conf must lie in (0, 1): {conf.tolist()}")
    if (conf <= (1 - conf) / (vocab - 2)).any():
        raise ValueError("scripted conf too low for the prediction to be the argmax")
    if (pred == mask_id).any():
        raise ValueError("a scripted prediction may not be the mask token")
    rows = torch.arange(n)
    logits = ((1 - conf) / (vocab - 2)).log()[:, None].expand(n, vocab).clone()
    logits[rows, pred] = conf.log()
    if margin is not None:
        margin = torch.as_tensor(margin, dtype=torch.float64)
        runner = (pred + 1) % vocab
        runner = torch.where(runner == mask_id, (runner + 1) % vocab, runner)
        for i in torch.nonzero(~margin.isnan()).flatten().tolist():
            c, m = float(conf[i]), float(margin[i])
            second = c * math.exp(-m)
            rest = (1 - c - second) / (vocab - 3)
            if not (0 < rest < second):
                raise ValueError(f"position {i}: conf {c} and margin {m} cannot both hold with {vocab} tokens")
            logits[i] = math.log(rest)
            logits[i, pred[i]] = math.log(c)
            logits[i, runner[i]] = math.log(second)
    logits[:, mask_id] = -math.inf
    return logits.float()


@dataclass
class Row:
    """One scripted step: confidence per response position, optional predictions and logit margins."""
    conf: Sequence[float]
    pred: Sequence[int] | None = None
    margin: Sequence[float] | None = None


def profile(n: int, base: float = 0.1, at: dict[int, float] | None = None,
            span: dict[tuple[int, int], float] | None = None) -> list[float]:
    """A confidence row: ``base`` everywhere, ``at[pos]`` at single positions, ``span[(a, b)]`` on inclusive runs."""
    row = [base] * n
    for (a, b), c in (span or {}).items():
        row[a:b + 1] = [c] * (b - a + 1)
    for pos, c in (at or {}).items():
        row[pos] = c
    return row


Script = Callable[[int, torch.Tensor], "Row | Sequence[float]"]


class ScriptedLM(nn.Module):
    """``model(input_ids=...)`` whose response logits follow a script.

    ``script`` is a list of rows (one per forward pass) or ``script(step, response_ids) -> row``; a row is a
    confidence list, a tuple ``(conf, pred)`` or ``(conf, pred, margin)``, or a ``Row``. After a list runs
    out, ``then`` (same signature) takes over; without it an extra forward pass is an error. Every call's
    input ids are kept in ``calls``.
    """

    def __init__(self, script, gen_length: int, vocab: int = VOCAB, mask_id: int = MASK_ID, then: Script | None = None):
        super().__init__()
        self.script, self.n, self.vocab, self.mask_id, self.then = script, gen_length, vocab, mask_id, then
        self.calls: list[torch.Tensor] = []

    def row(self, step: int, response: torch.Tensor) -> Row:
        if callable(self.script):
            row = self.script(step, response)
        elif step < len(self.script):
            row = self.script[step]
        elif self.then is not None:
            row = self.then(step, response)
        else:
            raise AssertionError(f"the script has {len(self.script)} steps but forward pass {step + 1} was asked for")
        if isinstance(row, Row):
            return row
        return Row(*row) if isinstance(row, tuple) else Row(conf=row)        # (conf, pred[, margin]) or conf

    def forward(self, input_ids: torch.Tensor, **kwargs):
        step = len(self.calls)
        self.calls.append(input_ids.clone())
        b, length = input_ids.shape
        row = self.row(step, input_ids[0, -self.n:])
        pred = row.pred if row.pred is not None else [token_at(i) for i in range(self.n)]
        logits = torch.zeros(b, length, self.vocab)
        logits[:, -self.n:] = scripted_logits(row.conf, pred, self.vocab, self.mask_id, row.margin)
        return SimpleNamespace(logits=logits)


def scripted(script, gen_length: int, *, then: Script | None = None, max_length: int = 512, kind: str = "masked-lm"):
    """A ``MaskPredictor`` over a ``ScriptedLM``; the module (with its ``calls``) is ``predictor.model``."""
    module = ScriptedLM(script, gen_length, then=then)
    return dico.from_module(module, FakeTokenizer(), kind=kind, mask_id=MASK_ID, max_length=max_length, name="scripted",
                            token_frequency=zipf_frequency(VOCAB))


def settle(conf: float = 0.99) -> Script:
    """A ``then`` for scripts: every position at ``conf`` from now on, so any rule finishes quickly."""
    return lambda step, response: [conf] * response.numel()


# ---------------------------------------------------------------------------- random logits

class RandomLM(nn.Module):
    """Seeded random logits, a deterministic function of the input ids (as a real model is).

    ``scale`` sets how peaked the predictions are; they sharpen as more of the sequence is decoded
    (``sharpen`` times at the end), and a ``peaks`` fraction of positions get a clear favourite, so
    confidence profiles range from flat to nearly certain. The mask token gets logits like any other:
    the loop must never commit it.
    """

    def __init__(self, seed: int = 0, scale: float = 2.0, sharpen: float = 2.0, peaks: float = 0.2,
                 vocab: int = VOCAB, mask_id: int = MASK_ID):
        super().__init__()
        self.seed, self.scale, self.sharpen, self.peaks = seed, scale, sharpen, peaks
        self.vocab, self.mask_id = vocab, mask_id
        self.calls: list[torch.Tensor] = []

    def forward(self, input_ids: torch.Tensor, **kwargs):
        self.calls.append(input_ids.clone())
        key = zlib.crc32(input_ids.numpy().tobytes()) ^ (self.seed * 2654435761 % 2**32)
        g = torch.Generator().manual_seed(key)
        b, length = input_ids.shape
        decoded = (input_ids != self.mask_id).float().mean()
        logits = torch.randn(b, length, self.vocab, generator=g) * self.scale * (1 + self.sharpen * decoded)
        peaked = torch.rand(b, length, generator=g) < self.peaks
        favourite = torch.randint(0, self.vocab, (b, length), generator=g)
        logits.scatter_add_(2, favourite[..., None], peaked[..., None].float() * 8.0)
        return SimpleNamespace(logits=logits)


def random_predictor(seed: int = 0, max_length: int = 512, **kw):
    return dico.from_module(RandomLM(seed, **kw), FakeTokenizer(), kind="masked-lm", mask_id=MASK_ID,
                            max_length=max_length, name="random", token_frequency=zipf_frequency(VOCAB, seed))


def zipf_frequency(vocab: int, seed: int = 0) -> torch.Tensor:
    """A token-frequency table (PC-Sampler) with Zipf's shape over a seeded order of the vocabulary."""
    order = torch.randperm(vocab, generator=torch.Generator().manual_seed(seed))
    table = 1.0 / (order.float() + 1)
    return table / table.sum()


# ---------------------------------------------------------------------------- LLaDA- and Dream-style

class MarkerLM(nn.Module):
    """LLaDA/Dream call signature with a real-size vocabulary; raw ``logits[:, i]`` peak on ``marker + i``.

    Small random noise on top (seeded), the peak growing with i so confidences differ by position.
    With ``mask_bias`` the raw favourite everywhere is the mask token, which a decoder must never commit.
    Only for sequences of at most 16 positions (~10 MB of logits per call).
    """

    def __init__(self, vocab: int, mask_id: int, marker: int = 1000, mask_bias: bool = False, seed: int = 0):
        super().__init__()
        self.vocab, self.mask_id, self.marker, self.mask_bias, self.seed = vocab, mask_id, marker, mask_bias, seed
        self.calls = 0

    def forward(self, input_ids: torch.Tensor, **kwargs):
        self.calls += 1
        b, length = input_ids.shape
        if length > 16:
            raise AssertionError("MarkerLM serves at most 16 positions")
        g = torch.Generator().manual_seed(self.seed)
        logits = torch.randn(b, length, self.vocab, generator=g) * 0.1                 # b, l, v
        i = torch.arange(length)
        logits[:, i, self.marker + i] = 6.0 + 0.5 * i.float()
        if self.mask_bias:
            logits[:, :, self.mask_id] = 50.0
        return SimpleNamespace(logits=logits)


def llada_standin(**kw):
    module = MarkerLM(LLADA_VOCAB, LLADA_MASK_ID, **kw)
    tok = FakeTokenizer(LLADA_VOCAB, LLADA_MASK_ID, eos_id=126081)
    return dico.from_module(module, tok, kind="llada", mask_id=LLADA_MASK_ID, max_length=16, name="llada-standin",
                            token_frequency=zipf_frequency(LLADA_VOCAB))


def dream_standin(**kw):
    module = MarkerLM(DREAM_VOCAB, DREAM_MASK_ID, **kw)
    tok = FakeTokenizer(DREAM_VOCAB, DREAM_MASK_ID, eos_id=151643)
    return dico.from_module(module, tok, kind="dream", mask_id=DREAM_MASK_ID, max_length=16, name="dream-standin",
                            token_frequency=zipf_frequency(DREAM_VOCAB))


# ---------------------------------------------------------------------------- a real tiny masked LM

TINY_TEXTS = ["Tom has 5 apples . He buys 3 more . How many apples does Tom have now ?",
              "The answer is 8 .", "Sort the words : cat dog bird"]


def tiny_model_folder(path: Path, max_positions: int = 64, seed: int = 0) -> Path:
    """Save a 2-layer ``BertForMaskedLM`` (hidden 32) with a ``build_tokenizer`` tokenizer under ``path``."""
    from dico.embedded.tokenizer import build_tokenizer
    from dico.embedded.train import build_model

    torch.manual_seed(seed)
    tokenizer = build_tokenizer(vocab_size=300, max_number=20)
    model = build_model(len(tokenizer), hidden=32, layers=2, heads=2, max_positions=max_positions)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


# ---------------------------------------------------------------------------- LLaDA / Dream with their own code

REMOTE_VOCAB = 64
REMOTE_WORDS = ["user", "assistant"] + [f"w{i}" for i in range(REMOTE_VOCAB - 9)]
END_TOKEN = {"llada": "<|eot_id|>", "dream": "<|im_end|>"}
CHAT_TEMPLATE = ("{% for m in messages %}<|start|> {{ m['role'] }} {{ m['content'] }} END {% endfor %}"
                 "{% if add_generation_prompt %}<|start|> assistant {% endif %}")


def remote_model_folder(path: Path, kind: str, seed: int = 0, **config) -> Path:
    """A model folder loaded through ``trust_remote_code``, shaped like LLaDA's (``kind="llada"``: a fast tokenizer
    whose own mask token is not the model's) or Dream's (``"dream"``: a slow tokenizer with ``get_vocab()`` only,
    no mask token, logits shifted by one, ``<|im_end|>`` ending the chat turn). The config's ``mask_token_id`` is
    the last id of the vocabulary, a token the tokenizer does not call a mask."""
    import importlib.util
    import json
    import shutil

    source = Path(__file__).with_name("remote_standin.py")
    spec = importlib.util.spec_from_file_location(f"remote_standin_{kind}", source)
    code = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(code)
    end = END_TOKEN[kind]
    words = ["<unk>", "<pad>", "<|start|>", "<|endoftext|>", end, "[MASK]"] + REMOTE_WORDS + ["<|mask_of_config|>"]
    vocab = {w: i for i, w in enumerate(words)}
    path.mkdir(parents=True, exist_ok=True)
    template = CHAT_TEMPLATE.replace("END", end)
    if kind == "llada":
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<pad>",
                                            eos_token="<|endoftext|>", mask_token="[MASK]", chat_template=template)
        tokenizer.save_pretrained(path)
    else:
        (path / "vocab.json").write_text(json.dumps(vocab))
        (path / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "StandinTokenizer",
            "auto_map": {"AutoTokenizer": ["modeling_standin.StandinTokenizer", None]},
            "chat_template": template, "eos_token": "<|endoftext|>", "unk_token": "<unk>", "pad_token": "<pad>"}))
    names = {"llada": ("LladaStandinConfig", "LladaStandin"), "dream": ("DreamStandinConfig", "DreamStandin")}[kind]
    torch.manual_seed(seed)
    settings = dict(vocab_size=len(words), mask_token_id=len(words) - 1, end_token_id=vocab[end]) | config
    model = getattr(code, names[1])(getattr(code, names[0])(**settings))
    model.save_pretrained(path, safe_serialization=True)
    shutil.copy(source, path / "modeling_standin.py")
    saved = json.loads((path / "config.json").read_text())
    saved["auto_map"] = {"AutoConfig": f"modeling_standin.{names[0]}", "AutoModel": f"modeling_standin.{names[1]}"}
    (path / "config.json").write_text(json.dumps(saved))
    counts = {str(i): 100 // (i + 1) for i in range(len(words) - 1)}     # as d2Cache ships LLaDA's and Dream's
    (path / "token_frequency.json").write_text(json.dumps({"num_token": sum(counts.values()) + 10,
                                                           "p_baseline_dict": counts}))
    return path


# The stand-ins the cache tests load (tests/conftest.py: remote_folders): LLaDA as released (full multi-head
# attention), LLaDA with every option its code has, Dream (grouped kv heads); and a one-layer model of each kind.
REMOTE_VARIANTS = {"llada": ("llada", {}),
                   "llada-options": ("llada", dict(n_kv_heads=2, attention_layer_norm=True, include_qkv_bias=True,
                                                   weight_tying=True, input_emb_norm=True, scale_logits=True)),
                   "dream": ("dream", {})}
REMOTE_LAYERS = {"llada": "n_layers", "dream": "num_hidden_layers"}        # each config's own name
# SDAR's stand-in code lives in the package: the blocks bench (python -m dico.bench blocks) builds it at full size too.
SDAR_STANDIN = Path(dico.__file__).parent / "bench" / "sdar_standin.py"


def refused_before_any_pass(predictor, field: str, *args, **request) -> None:
    """``dico.generate(predictor, *args, **request)`` is refused with one line naming ``field``, before the model
    computes a single pass."""
    calls = []
    hook = predictor.model.register_forward_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(ValueError, match=f"^{field}: ") as err:
            dico.generate(predictor, *args, **request)
    finally:
        hook.remove()
    assert not calls and "\n" not in str(err.value)


def release_model_folder(path: Path, source: str | Path, code_name: str, classes: tuple[str, str], words: list[str],
                         tokens: dict, end: str, seed: int, config: dict, architecture: str | None = None,
                         mute: str | None = None) -> Path:
    """A block diffusion release's stand-in folder, loaded through ``trust_remote_code`` as the release is:
    ``tests/<source>``, or the file ``source`` is (written after the release's modeling code), saved as ``<code_name>``
    beside its random weights (``classes``: its config and model class names; ``architecture``: the release's name for
    the model class in the config), a fast word-level tokenizer over ``words`` + REMOTE_WORDS with the special
    ``tokens`` (PreTrainedTokenizerFast keywords) and a chat template ending turns with ``end``. The code imports
    ``flash_attn`` / ``LossKwargs`` where its release does, so it is read inside ``release_imports``. ``mute``: a token
    whose output row is zero, so that it is never the argmax (a trained model never predicts its mask token, and its
    generate would write it back)."""
    import importlib.util
    import json
    import shutil

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from dico.block import release_imports

    file = source if isinstance(source, Path) else Path(__file__).with_name(source)
    with release_imports():
        spec = importlib.util.spec_from_file_location(file.stem, file)
        code = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(code)
    words = words + REMOTE_WORDS
    vocab = {w: i for i, w in enumerate(words)}
    path.mkdir(parents=True, exist_ok=True)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>",
                                        chat_template=CHAT_TEMPLATE.replace("END", end), **tokens)
    tokenizer.save_pretrained(path)
    torch.manual_seed(seed)
    config_class, model_class = (getattr(code, name) for name in classes)
    model = model_class(config_class(**(dict(vocab_size=len(words)) | config)))
    if mute is not None:
        with torch.no_grad():
            model.lm_head.weight[vocab[mute]] = 0.0
    model.save_pretrained(path, safe_serialization=True)
    shutil.copy(file, path / code_name)
    module = Path(code_name).stem
    saved = json.loads((path / "config.json").read_text())
    saved["architectures"] = [architecture or classes[1]]
    saved["auto_map"] = {"AutoConfig": f"{module}.{classes[0]}", "AutoModelForCausalLM": f"{module}.{classes[1]}"}
    (path / "config.json").write_text(json.dumps(saved))
    return path


def block_model_folder(path: Path, seed: int = 0, **config) -> Path:
    """An SDAR-shaped block diffusion model folder (``dico/bench/sdar_standin.py``, with SDAR's own unconditional
    ``flash_attn`` / ``LossKwargs`` imports): its mask token ``<|MASK|>`` (the config names no mask id, as SDAR's does
    not), an end-of-text token, and ``block_size`` 4 unless ``config`` says otherwise."""
    return release_model_folder(
        path, SDAR_STANDIN, "modeling_standin.py", ("SDARStandinConfig", "SDARStandinForCausalLM"),
        ["<unk>", "<pad>", "<|start|>", "<|endoftext|>", "<|im_end|>", "<|MASK|>"],
        dict(pad_token="<pad>", eos_token="<|endoftext|>", mask_token="<|MASK|>"), "<|im_end|>", seed, config)


def llada2_model_folder(path: Path, seed: int = 0, **config) -> Path:
    """A LLaDA 2.x-shaped block diffusion model folder (``tests/llada2_standin.py``, a mixture of experts): its mask
    token ``<|mask|>``, an end-of-text token, and a config naming no block size (blocks of 32, its generate's
    default), as the released configs do; the mask token is never predicted."""
    return release_model_folder(
        path, "llada2_standin.py", "modeling_llada2_moe.py", ("LLaDA2MoeConfig", "LLaDA2MoeModelLM"),
        ["<unk>", "<pad>", "<|start|>", "<|endoftext|>", "<|role_end|>", "<|mask|>"],
        dict(pad_token="<pad>", eos_token="<|endoftext|>", mask_token="<|mask|>"), "<|role_end|>", seed, config,
        mute="<|mask|>")


def fast_v2_model_folder(path: Path, seed: int = 0, **config) -> Path:
    """A Fast-dLLM v2-shaped model folder (``tests/fast_v2_standin.py`` as its ``modeling.py``): the release's
    architecture name, a tokenizer whose mask token is only one of its special tokens (``|<MASK>|``) with
    ``<|im_end|>`` as its end of text; the mask token is never predicted."""
    return release_model_folder(
        path, "fast_v2_standin.py", "modeling.py", ("FastV2StandinConfig", "FastV2StandinForCausalLM"),
        ["<unk>", "<|endoftext|>", "<|start|>", "<|im_end|>", "|<MASK>|"],
        dict(pad_token="<|endoftext|>", eos_token="<|im_end|>", additional_special_tokens=["|<MASK>|"]),
        "<|im_end|>", seed, config, architecture="Fast_dLLM_QwenForCausalLM", mute="|<MASK>|")


def partial_cached_pass(predictor, run, steps: int = 3):
    """Decode ``steps`` steps of a cached ``Decoding`` (decoded and masked positions both exist), refresh on its
    current ids as if a block started, then make the next pass, one between refreshes: its computed positions and
    logits (l, v), to compare with an uncached pass over the same ids."""
    for _ in range(steps):
        logits, _ = run.forward()
        run.step(logits)
    run.cache.window = None
    run.plan_pass()
    assert run.cache.refreshed
    run.sampler.logits(predictor, run.ids, run.m, caches=[run.cache])
    positions = run.plan_pass().positions
    assert not run.cache.refreshed and 0 < positions.numel() < run.ids.shape[1]
    return positions, run.sampler.logits(predictor, run.ids, run.m, caches=[run.cache])[0][0]


# ---------------------------------------------------------------------------- driving rules

RULE_PROMPT = "w20 w21 w22"


def scores(conf, *, decoded=(), window=None, margin=None):
    """Scores over len(conf) response positions; ``decoded`` positions are no longer masked."""
    from dico.rules import Scores
    n = len(conf)
    masked = torch.ones(n, dtype=torch.bool)
    masked[list(decoded)] = False
    margin = torch.zeros(n) if margin is None else torch.tensor(margin, dtype=torch.float32)
    return Scores(conf=torch.tensor(conf, dtype=torch.float32), pred=torch.arange(n) + 10, margin=margin,
                  masked=masked, window=window or (0, n))


def written(conf, pred, tokens, *, masked=(), fixed=(), window=None):
    """Scores of a response whose ``tokens`` are written (but at ``masked``), the model predicting ``pred``: for the
    rules that look at written tokens (they edit or take them back) or at the token predicted."""
    from dico.rules import Scores
    n = len(conf)
    is_masked = torch.zeros(n, dtype=torch.bool)
    is_masked[list(masked)] = True
    is_fixed = torch.zeros(n, dtype=torch.bool)
    is_fixed[list(fixed)] = True
    ids = torch.tensor(tokens)
    ids[is_masked] = MASK_ID
    return Scores(conf=torch.tensor(conf, dtype=torch.float32), pred=torch.tensor(pred), margin=torch.zeros(n),
                  masked=is_masked, window=window or (0, n), fixed=is_fixed, tokens=ids)


def with_signals(s, **signals):
    """``s`` with the per-position signals a rule asks of the loop (entropy, KL, a mirror's confidence)."""
    s.signals = {k: torch.tensor(v, dtype=torch.float32) for k, v in signals.items()}
    return s


def rule(method: str, mode: str = "non-ar", **settings):
    """A rule with its settings as keywords."""
    from dico.methods import make_rule
    return make_rule(method, mode, settings)


def run(script, n: int, *, then=None, method: str = "dico", mode: str = "non-ar", block_length: int | None = None,
        **settings) -> dico.Trace:
    """Decode with a scripted predictor; every forward pass must become a step (no pass thrown away)."""
    predictor = scripted(script, n, then=then)
    trace = dico.generate(predictor, RULE_PROMPT, method, mode=mode, gen_length=n, block_length=block_length,
                          **settings)
    assert len(predictor.model.calls) == trace.nfe == len(trace.steps)
    return trace


def phases(trace: dico.Trace) -> list[str]:
    return [step.phase for step in trace.steps]
