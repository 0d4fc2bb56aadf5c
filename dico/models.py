"""Mask predictors: one interface over a plain masked LM, LLaDA, Dream and block diffusion models (``dico.block``).

``load_model(name_or_path)`` returns a ``MaskPredictor``: ``forward(ids) -> logits`` with logits
aligned so that ``logits[:, i]`` predicts position i (Dream's shift is undone here, once), plus the
mask id, the tokenizer, prompt encoding and the longest sequence the model accepts. Decoders never see
which kind of model they drive.

Everything is read from the model, never guessed from its name: the kind from the config's
``model_type`` / ``architectures``; the mask id from the config's ``mask_token_id``, else the
tokenizer's mask token; the chat template whenever the tokenizer has one (``chat=False`` turns it off);
the end-of-text ids from ``get_vocab()`` and the generation config's EOS ids. LLaDA's and Dream's
attention maps are recomputed by forward hooks (``dico.attention``).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dico.attention import AttentionHooks
from dico.block import BLOCK_KIND, SDAR, BlockRelease, block_forward, block_size_of, release_imports, release_of
from dico.cache import cached_forward
from dico.remote_cache import attach
from dico.trace import END_TEXTS

_ASSETS = Path(__file__).resolve().parent.parent / "assets"
TOKEN_FREQUENCY = "token_frequency.json"   # beside the weights: their training text's token counts (PC-Sampler)
EMBEDDED_NAME = "dico-tiny"                # the default model: the short families every table was measured on
# The models the project trains and ships, by name: each loads offline from its folder under assets/.
# dico-tiny-long is dico-tiny trained further on long worked answers (the chain family) with LLaDA 2.1's editing
# objective: the regime where the paper measures DiCo (answers that fill gen 256).
EMBEDDED_MODELS = {EMBEDDED_NAME: _ASSETS / "dico-tiny", "dico-tiny-long": _ASSETS / "dico-tiny-long"}
EMBEDDED = EMBEDDED_MODELS[EMBEDDED_NAME]


def embedded_folder(model: str | os.PathLike | None) -> Path | None:
    """The folder of an embedded model named ``model`` (None or "" is the default one); None for anything else."""
    return EMBEDDED if model in (None, "") else EMBEDDED_MODELS.get(str(model))
# Remote-code models whose code this project allows without trust_remote_code=True (the id decides only that).
KNOWN_REMOTE = frozenset({
    "GSAI-ML/LLaDA-8B-Instruct", "GSAI-ML/LLaDA-8B-Base", "GSAI-ML/LLaDA-1.5",
    "inclusionAI/LLaDA-MoE-7B-A1B-Instruct", "inclusionAI/LLaDA-MoE-7B-A1B-Base",
    "Dream-org/Dream-v0-Instruct-7B", "Dream-org/Dream-v0-Base-7B",
    # block diffusion (dico.block): SDAR's chat models (JetAstra/SDAR's model cards)
    "JetLM/SDAR-1.7B-Chat", "JetLM/SDAR-4B-Chat", "JetLM/SDAR-8B-Chat",
    # Fast-dLLM v2 (its model card; NVlabs/Fast-dLLM v2/)
    "Efficient-Large-Model/Fast_dLLM_v2_1.5B", "Efficient-Large-Model/Fast_dLLM_v2_7B",
    # LLaDA 2.x (inclusionAI's model cards, each shipping modeling_llada2_moe.py)
    "inclusionAI/LLaDA2.0-mini", "inclusionAI/LLaDA2.0-flash",
    "inclusionAI/LLaDA2.1-mini", "inclusionAI/LLaDA2.1-flash",
})
# Mask tokens as tokenizers spell them, for a model whose config and tokenizer do not name theirs.
MASK_TOKENS = ("<|mdm_mask|>", "<|mask|>", "<|MASK|>", "|<MASK>|", "[MASK]", "<mask>")     # |<MASK>|: Fast-dLLM v2


class ModelError(ValueError):
    """A model that cannot be used; the message names the model and what to do."""


@dataclass
class MaskPredictor:
    """A model that predicts every masked position at once, with what decoding needs to drive it."""
    name: str
    kind: str                      # "masked-lm" | "llada" | "dream" | "block" (block-causal: SDAR, dico.block)
    model: torch.nn.Module
    tokenizer: object
    mask_id: int
    max_length: int
    chat: bool = False
    supports_attention: bool = False
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    dtype: torch.dtype = torch.float32
    hooks: AttentionHooks | None = field(default=None, repr=False)   # LLaDA / Dream: attention recomputed
    eos_ids: tuple = ()                                                # the generation config's EOS ids
    token_frequency: torch.Tensor | None = None   # (v,) CPU: each token's share of the training text (PC-Sampler)
    block: int | None = None       # a block-causal model's block size (its config's), None for any other kind
    release: BlockRelease | None = None   # a block-causal model's release (how its forward is called)
    _spacing: str | None = field(default=None, repr=False)
    _stops: frozenset | None = field(default=None, repr=False)

    def to_model(self, tensor: torch.Tensor) -> torch.Tensor:
        """The one way a CPU tensor reaches the model's device."""
        return tensor.to(self.device)

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, attentions: bool = False, attention_mask: torch.Tensor | None = None,
                cache_rows: list | None = None, per_layer: bool = False):
        """Logits (b, l, v) aligned to positions, in the model's dtype and on its device; with ``attentions``,
        the per-layer maps too. Scoring reduces them where they are (``dico.sampling.score``).

        ``attention_mask`` (b, l; 1 = real token) lets a batch pad its rows on the right: positions keep
        their ids, so each row's logits are those of its own sequence alone (``dico.batch``).
        ``cache_rows`` (one ``(KVStore, positions)`` per row) makes it a cached pass (``dico.cache``).
        ``per_layer``: a model whose maps are recomputed (LLaDA, Dream) gives one a layer too, not their mean."""
        if self.kind == BLOCK_KIND:           # its block-causal mask, or its exact cache of finished blocks
            return block_forward(self, ids, attention_mask, cache_rows)
        if cache_rows is not None:
            lengths = None if attention_mask is None else attention_mask.sum(dim=1).tolist()
            return cached_forward(self, ids, [s for s, _ in cache_rows], [p for _, p in cache_rows], lengths,
                                  attentions and self.supports_attention)
        kwargs, key_mask = {}, None
        capture = attentions and self.supports_attention
        if capture and self.hooks is None:
            kwargs["output_attentions"] = True
        if attention_mask is not None:
            mask = self.to_model(attention_mask)
            key_mask = mask.bool()
            if self.kind == "dream":   # Dream's code takes a 4-D boolean mask (b, 1, l, l); padded keys hidden
                mask = key_mask[:, None, None, :].expand(-1, 1, mask.shape[1], -1)
            kwargs["attention_mask"] = mask
        maps = None
        if capture and self.hooks is not None:
            with self.hooks.capture(key_mask, per_layer):
                out = self.model(input_ids=self.to_model(ids), **kwargs)
            maps = self.hooks.maps()
        else:
            out = self.model(input_ids=self.to_model(ids), **kwargs)
            maps = out.attentions if capture else None
        logits = out.logits
        if self.kind == "dream":   # Dream predicts position i at logits[i-1]; position 0 keeps its own
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        return logits, maps

    def encode_prompt(self, prompt: str) -> list[int]:
        """Prompt token ids as the model was trained to see them (its chat template, when it has one and it is on)."""
        if self.chat:
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                      add_generation_prompt=True, tokenize=False)
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer(prompt)["input_ids"]

    def encode_word(self, word: str) -> list[int]:
        """A word's token ids as they are written inside a response (a constraint, a forced token)."""
        return list(self.tokenizer(word, add_special_tokens=False)["input_ids"])

    def unknown_words(self, prompt: str) -> list[str]:
        """Words of the prompt the tokenizer maps to its unknown token (the embedded model's small vocabulary)."""
        unk = getattr(self.tokenizer, "unk_token_id", None)
        if unk is None:
            return []
        enc = self.tokenizer(prompt, add_special_tokens=False, return_offsets_mapping=True)
        return [prompt[a:b] for tid, (a, b) in zip(enc["input_ids"], enc["offset_mapping"]) if tid == unk]

    def token_text(self, token_id: int) -> str:
        """Display text of one token, spaced so that joining a response's tokens reads as text.

        BPE tokens carry their own leading space; word-level and WordPiece pieces get one unless they
        are punctuation or a '##' continuation.
        """
        if self._spacing is None:
            self._spacing = _spacing_style(self.tokenizer)
        if self._spacing == "decode":
            return self.tokenizer.decode([int(token_id)], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        piece = self.tokenizer.convert_ids_to_tokens(int(token_id)) or ""
        if piece.startswith("##"):
            return piece[2:]
        return piece if _PUNCTUATION.fullmatch(piece) else " " + piece

    def stop_ids(self) -> set[int]:
        """Token ids that end a response: the tokenizer's eos, the generation config's EOS ids and the end-of-text
        tokens of known chat formats found in ``get_vocab()`` (slow tokenizers have no ``.vocab``)."""
        if self._stops is None:     # get_vocab() builds a fresh dict (126k entries for LLaDA): once only
            vocab = self.tokenizer.get_vocab() if hasattr(self.tokenizer, "get_vocab") else {}
            ids = {getattr(self.tokenizer, "eos_token_id", None)} | {vocab[t] for t in END_TEXTS if t in vocab}
            ids |= set(self.eos_ids) | _eos_ids(getattr(self.model, "generation_config", None))
            self._stops = frozenset(int(i) for i in ids if i is not None and int(i) != self.mask_id)
        return set(self._stops)

    def answer_length(self, ids) -> int:
        """Positions before the first end-of-text token: the answer; the rest of the response is padding."""
        stops = self.stop_ids()
        return next((i for i, tid in enumerate(ids) if int(tid) in stops), len(ids))

    def decode(self, ids) -> str:
        """Response text up to the first end-of-text token, special tokens removed."""
        ids = [int(i) for i in ids]
        stops = self.stop_ids()
        for cut, tid in enumerate(ids):
            if tid in stops:
                ids = ids[:cut]
                break
        ids = [i for i in ids if i != self.mask_id]
        if self._spacing is None:
            self._spacing = _spacing_style(self.tokenizer)
        if self._spacing == "words":       # the same spacing as the per-token display ("answer: 8", not "answer : 8")
            special = set(self.tokenizer.all_special_ids)
            pieces = [self.token_text(i) for i in ids if i not in special]
            return "".join(p.lstrip() if i and pieces[i - 1] == "'" else p for i, p in enumerate(pieces)).strip()
        return self.tokenizer.decode(ids, skip_special_tokens=True).strip()


_PUNCTUATION = re.compile(r"[.,!?;:)\]}'%]+")


def train_log(model: str | os.PathLike | None) -> dict:
    """A locally trained model's train_log.json ({} for a hub id or a folder without one): which step and which
    training wording the weights are, so tables and the card say what they measured."""
    folder = embedded_folder(model) or Path(model)
    try:
        return json.loads((folder / "train_log.json").read_text())
    except (OSError, ValueError):
        return {}


def _eos_ids(generation_config) -> set:
    eos = getattr(generation_config, "eos_token_id", None)
    return set(eos) if isinstance(eos, (list, tuple)) else {eos}


def _generation_eos(name: str) -> tuple:
    """The EOS ids of the model's generation_config.json (models that cannot ``generate()`` do not load it)."""
    from transformers import GenerationConfig
    try:
        return tuple(i for i in _eos_ids(GenerationConfig.from_pretrained(name)) if i is not None)
    except Exception:              # noqa: BLE001 (no generation config: nothing to add)
        return ()


def _spacing_style(tokenizer) -> str:
    """'words' for word-level and WordPiece tokenizers (pieces carry no spaces), else 'decode'."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    try:
        kind = json.loads(backend.to_str())["model"]["type"] if backend is not None else ""
    except (ValueError, KeyError, TypeError):
        kind = ""
    return "words" if kind in ("WordLevel", "WordPiece") else "decode"


def default_device_dtype(device: str | None = None, dtype: str | None = None):
    """CUDA with bf16 when present, else CPU with fp32 (bf16 matmuls are slow and lossy on CPU)."""
    try:
        dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except (RuntimeError, TypeError) as exc:
        raise ModelError(f"device: unknown device {device!r}; choose cpu, cuda or cuda:N") from exc
    if dtype is None:
        dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    else:
        names = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
                 "float16": torch.float16, "fp16": torch.float16}
        if dtype not in names:
            raise ModelError(f"dtype: unknown dtype {dtype!r}; choose from {', '.join(names)}")
        dt = names[dtype]
    return dev, dt


def _local_config(path: Path) -> dict:
    try:
        return json.loads((path / "config.json").read_text())
    except FileNotFoundError:
        raise ModelError(f"model: {path} has no config.json; it is not a transformers model folder") from None
    except json.JSONDecodeError as exc:
        raise ModelError(f"model: {path}/config.json is not valid JSON ({exc})") from None


def _hub_config(name: str) -> dict:
    """A hub model's config.json as a dict (only the JSON is fetched: no model code runs)."""
    from transformers import PretrainedConfig
    try:
        return PretrainedConfig.get_config_dict(name)[0]
    except Exception as exc:       # noqa: BLE001 (network, hub and parsing errors all mean: cannot load)
        raise ModelError(f"model: cannot load {name!r} ({_first_line(exc)}). Hub models need network access or a "
                         "local copy") from None


def _kind_of(config: dict) -> str:
    """'block' (a block diffusion release, ``dico.block``), 'dream' (logits shifted by one), 'llada' or 'masked-lm',
    from the config's model type and architectures."""
    if release_of(config) is not None:
        return BLOCK_KIND
    text = " ".join([str(config.get("model_type", ""))] + list(config.get("architectures") or [])).lower()
    if "dream" in text:
        return "dream"
    if "llada" in text:
        return "llada"
    return "masked-lm"


def _block_of(config: dict, label: str) -> int | None:
    """A block diffusion model's block size (``dico.block``), None for any other model; ModelError, before any of its
    code runs, for a release the project recognises but does not drive."""
    release = release_of(config)
    if release is None:
        return None
    if not release.driven:
        raise ModelError(f"model: {label!r} is {release.name}, a block diffusion model (causal across blocks); "
                         f"the project recognises it but cannot decode it yet: {release.why_not}")
    try:
        return block_size_of(config, release)
    except ValueError as exc:
        raise ModelError(f"model: {label!r}: {exc}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _mask_id(config: dict, tokenizer, label: str, vocab_size: int | None) -> int:
    """The config's ``mask_token_id``, else the tokenizer's mask token, else a known mask token in its vocabulary."""
    mask_id = config.get("mask_token_id")
    if mask_id is None:
        mask_id = getattr(tokenizer, "mask_token_id", None)
    if mask_id is None:
        vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
        mask_id = next((vocab[t] for t in MASK_TOKENS if t in vocab), None)
    if mask_id is None:
        raise ModelError(f"model: {label!r} names no mask token: its config.json has no mask_token_id and its "
                         "tokenizer no mask token; add \"mask_token_id\": <id> to config.json")
    if not isinstance(mask_id, int) or mask_id < 0 or (vocab_size and mask_id >= vocab_size):
        raise ModelError(f"model: {label!r} has mask_token_id {mask_id!r}, outside its {vocab_size} output tokens")
    return mask_id


def _vocab_size(model) -> int | None:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if weight is not None:
        return int(weight.shape[0])
    cfg = model.config
    size = getattr(cfg, "embedding_size", None) or getattr(cfg, "vocab_size", None)
    return int(size) if size else None


def load_model(name_or_path: str | os.PathLike | None = None, *, trust_remote_code: bool = False,
               device: str | None = None, dtype: str | None = None, attention: bool = True, chat: bool | None = None,
               attention_layers=None) -> MaskPredictor:
    """Load a mask predictor by hub id or local folder; ``None`` or ``"dico-tiny"`` is the embedded model, and
    ``"dico-tiny-long"`` the embedded long-answer model (``EMBEDDED_MODELS``).

    ``trust_remote_code`` runs the model's own Python code: allowed for the known LLaDA and Dream ids
    (KNOWN_REMOTE), otherwise only when the caller opts in. ``device`` / ``dtype``: CUDA with bfloat16 when
    present, else the CPU with float32. ``attention`` prepares attention maps: eager attention for a plain
    masked LM, recomputing hooks on the query/key projections of ``attention_layers`` (default all) for
    LLaDA and Dream. ``chat``: None uses the tokenizer's chat template when it has one; False never does.
    Every failure is a ``ModelError`` whose message names the model and what to do.
    """
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    folder = embedded_folder(name_or_path)
    name = str(folder) if folder else str(name_or_path)
    path = Path(name).expanduser()
    is_local = path.exists()
    label = next((k for k, v in EMBEDDED_MODELS.items() if str(v) == name), name)
    if folder and not (path / "config.json").exists():
        raise ModelError(f"model: the embedded model {label} is missing at {folder}; see "
                         f"assets/{folder.name}/README.md for how it is trained")
    if not is_local and (name.startswith((".", "/", "~")) or name.count("/") != 1):
        known = ", ".join(EMBEDDED_MODELS)
        raise ModelError(f"model: {name!r} is neither an embedded model ({known}), an existing folder nor a hub id "
                         "like 'owner/name'")
    dev, dt = default_device_dtype(device, dtype)
    config = _local_config(path) if is_local else _hub_config(name)
    kind = _kind_of(config)
    block = _block_of(config, label)
    release = release_of(config) if block is not None else None
    needs_code = kind != "masked-lm" or bool(config.get("auto_map"))
    if needs_code and name not in KNOWN_REMOTE and not trust_remote_code:
        raise ModelError(f"model: {name!r} ships its own code; pass trust_remote_code=True (CLI: --trust-remote-code) "
                         f"if you trust it. Known ids: {', '.join(sorted(KNOWN_REMOTE))}")
    try:
        if kind == BLOCK_KIND:       # the release's code as published, its CPU fallbacks present while it imports
            with release_imports():
                tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=True)
                model = AutoModelForCausalLM.from_pretrained(name, dtype=dt, trust_remote_code=True)
        elif kind == "masked-lm":
            tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=needs_code)
            # eager for attention maps, and for relative positions (sdpa would warn and fall back anyway)
            relative = config.get("position_embedding_type", "absolute") != "absolute"
            kwargs = {"attn_implementation": "eager"} if attention or relative else {}
            model = AutoModelForMaskedLM.from_pretrained(name, dtype=dt, trust_remote_code=needs_code, **kwargs)
        else:
            tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=needs_code)
            model = AutoModel.from_pretrained(name, dtype=dt, trust_remote_code=True)
        model.to(dev).eval()
    except torch.cuda.OutOfMemoryError:
        raise ModelError(f"model: {label!r} does not fit in the memory of {dev}; LLaDA and Dream need about 20 GB "
                         "of GPU memory") from None
    except Exception as exc:       # noqa: BLE001 (a model's own code may raise anything: report, never a traceback)
        raise ModelError(f"model: cannot load {label!r} ({_first_line(exc)}). Hub models need network access or a "
                         "local copy; LLaDA and Dream need a GPU with about 20 GB of memory") from None
    vocab_size = _vocab_size(model)
    mask_id = _mask_id(config, tokenizer, label, vocab_size)
    cfg = model.config
    max_length = int(getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "max_sequence_length", None) or 4096)
    has_template = getattr(tokenizer, "chat_template", None) is not None
    if chat and not has_template:
        raise ModelError(f"chat: the tokenizer of {label!r} has no chat template")
    hooks = AttentionHooks.find(model, attention_layers) if attention and kind in ("llada", "dream") else None
    if kind in ("llada", "dream"):
        attach(model, kind)         # a cached forward when its modules are LLaDA's or Dream's (dico.remote_cache)
    frequency = path / TOKEN_FREQUENCY
    table = read_token_frequency(frequency, vocab_size or len(tokenizer)) if is_local and frequency.exists() else None
    return MaskPredictor(name=label, kind=kind, model=model, tokenizer=tokenizer, mask_id=mask_id,
                         max_length=max_length, chat=has_template if chat is None else chat,
                         supports_attention=attention and (kind == "masked-lm" or hooks is not None), device=dev,
                         dtype=dt, hooks=hooks, eos_ids=_generation_eos(name), token_frequency=table, block=block,
                         release=release)


def read_token_frequency(path: str | os.PathLike, vocab_size: int) -> torch.Tensor:
    """A token-frequency table as PC-Sampler's code (and d2Cache's, which ships LLaDA's and Dream's) stores it:
    JSON ``{"num_token": N, "p_baseline_dict": {token id: count}}``; each token's count / N, and 1 / N for a token
    never seen. ModelError when the file cannot be read."""
    try:
        corpus = json.loads(Path(path).read_text())
        total = int(corpus["num_token"])
        counts = {int(k): float(v) for k, v in corpus["p_baseline_dict"].items()}
        if total <= 0 or any(k < 0 or k >= vocab_size or v < 0 for k, v in counts.items()):
            raise ValueError("counts outside the vocabulary or a total that is not positive")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ModelError(f"token_frequency: cannot read {str(path)!r} ({_first_line(exc)}); it must be JSON "
                         '{"num_token": N, "p_baseline_dict": {"<token id>": count, ...}}') from None
    table = torch.full((vocab_size,), 1.0 / total)
    if counts:
        table[torch.tensor(list(counts))] = torch.tensor(list(counts.values())) / total
    return table


def from_module(model: torch.nn.Module, tokenizer, *, kind: str, mask_id: int, max_length: int, name: str = "custom",
                chat: bool = False, device: str | torch.device = "cpu",
                token_frequency: torch.Tensor | None = None, block: int | None = None,
                release: BlockRelease | None = None) -> MaskPredictor:
    """Wrap an already built module (tests' stand-ins, or a model loaded by hand) as a mask predictor on ``device``
    (where the module already is); ``token_frequency``: its (v,) table for PC-Sampler (``read_token_frequency``);
    ``block``: a block-causal model's block size (kind "block"); ``release``: whose code it runs (``dico.block``;
    SDAR's when not given)."""
    if kind not in ("masked-lm", "llada", "dream", BLOCK_KIND):
        raise ModelError(f"kind: unknown model kind {kind!r}; choose masked-lm, llada, dream or block")
    if (kind == BLOCK_KIND) != (block is not None) or (block is not None and block < 1):
        raise ModelError(f"block: a block-causal model (kind block) needs its block size >= 1, and no other kind "
                         f"has one; got kind {kind!r} with block {block!r}")
    if kind in ("llada", "dream"):
        attach(model, kind)
    return MaskPredictor(name=name, kind=kind, model=model.eval(), tokenizer=tokenizer, mask_id=mask_id,
                         max_length=max_length, chat=chat, supports_attention=False, device=torch.device(device),
                         token_frequency=token_frequency, block=block,
                         release=(release or SDAR) if kind == BLOCK_KIND else None)
