"""Mask predictors: one interface over a plain masked LM, LLaDA and Dream.

``load_model(name_or_path)`` returns a ``MaskPredictor``: ``forward(ids) -> logits`` with logits
aligned so that ``logits[:, i]`` predicts position i (Dream's shift is undone here, once), plus the
mask id, the tokenizer, prompt encoding (chat template for Instruct models) and the longest
sequence the model accepts. Decoders never see which kind of model they drive.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

EMBEDDED = Path(__file__).resolve().parent.parent / "assets" / "dico-tiny"
EMBEDDED_NAME = "dico-tiny"
LLADA_MASK_ID = 126336
DREAM_MASK_ID = 151666

# Remote-code models this project knows; anything else with custom code needs trust_remote_code=True.
KNOWN_REMOTE = {
    "GSAI-ML/LLaDA-8B-Instruct": "llada", "GSAI-ML/LLaDA-8B-Base": "llada", "GSAI-ML/LLaDA-1.5": "llada",
    "inclusionAI/LLaDA-MoE-7B-A1B-Instruct": "llada", "inclusionAI/LLaDA-MoE-7B-A1B-Base": "llada",
    "Dream-org/Dream-v0-Instruct-7B": "dream", "Dream-org/Dream-v0-Base-7B": "dream",
}


class ModelError(ValueError):
    """A model that cannot be used; the message names the model and what to do."""


@dataclass
class MaskPredictor:
    """A model that predicts every masked position at once, with what decoding needs to drive it."""
    name: str
    kind: str                      # "masked-lm" | "llada" | "dream"
    model: torch.nn.Module
    tokenizer: object
    mask_id: int
    max_length: int
    chat: bool = False
    supports_attention: bool = False
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    _spacing: str | None = field(default=None, repr=False)
    _stops: frozenset | None = field(default=None, repr=False)

    def to_model(self, tensor: torch.Tensor) -> torch.Tensor:
        """The one way a CPU tensor reaches the model's device (tests emulate an accelerator by overriding it)."""
        return tensor.to(self.device)

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, attentions: bool = False, attention_mask: torch.Tensor | None = None):
        """Logits (b, l, v) aligned to positions, in the model's dtype and on its device; with ``attentions``,
        the per-layer maps too. Scoring reduces them where they are (``dico.loop.score``).

        ``attention_mask`` (b, l; 1 = real token) lets a batch pad its rows on the right: positions keep
        their ids, so each row's logits are those of its own sequence alone (``dico.batch``)."""
        kwargs = {"output_attentions": True} if attentions and self.supports_attention else {}
        if attention_mask is not None:
            mask = self.to_model(attention_mask)
            if self.kind == "dream":   # Dream's code takes a 4-D boolean mask (b, 1, l, l); padded keys hidden
                mask = mask.bool()[:, None, None, :].expand(-1, 1, mask.shape[1], -1)
            kwargs["attention_mask"] = mask
        out = self.model(input_ids=self.to_model(ids), **kwargs)
        logits = out.logits
        if self.kind == "dream":   # Dream predicts position i at logits[i-1]; position 0 keeps its own
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        return logits, (out.attentions if kwargs else None)

    def encode_prompt(self, prompt: str) -> list[int]:
        """Prompt token ids as the model was trained to see them (chat template for Instruct models)."""
        if self.chat:
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                      add_generation_prompt=True, tokenize=False)
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer(prompt)["input_ids"]

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
        """Token ids that end a response: the tokenizer's eos and the end-of-text tokens of known chat formats."""
        if self._stops is None:     # tokenizer.vocab builds a fresh dict (126k entries for LLaDA): once only
            vocab = getattr(self.tokenizer, "vocab", {}) or {}
            ids = {getattr(self.tokenizer, "eos_token_id", None)} | {vocab[t] for t in END_TOKENS if t in vocab}
            self._stops = frozenset(int(i) for i in ids if i is not None)
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


# End-of-text tokens of the supported tokenizers (embedded, LLaDA/Llama-3, Dream/Qwen, GPT-2, BERT-like).
END_TOKENS = frozenset({"<|eot|>", "<|endoftext|>", "<|eot_id|>", "<|im_end|>", "</s>"})
_PUNCTUATION = re.compile(r"[.,!?;:)\]}'%]+")


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
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
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


def _kind_of(name: str, config: dict | None) -> str:
    if name in KNOWN_REMOTE:
        return KNOWN_REMOTE[name]
    text = json.dumps(config or {}).lower() + name.lower()
    if "llada" in text:
        return "llada"
    if "dream" in text:
        return "dream"
    return "masked-lm"


def load_model(name_or_path: str | os.PathLike | None = None, *, trust_remote_code: bool = False,
               device: str | None = None, dtype: str | None = None, attention: bool = True) -> MaskPredictor:
    """Load a mask predictor by hub id or local folder; ``None`` or ``"dico-tiny"`` is the embedded model.

    ``trust_remote_code`` runs the model's own Python code: allowed for the known LLaDA and Dream ids
    (KNOWN_REMOTE), otherwise only when the caller opts in. ``attention`` asks for eager attention so
    attention maps can be captured (plain masked LMs only; LLaDA's code does not return them).
    """
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    name = str(name_or_path) if name_or_path not in (None, "", EMBEDDED_NAME) else str(EMBEDDED)
    path = Path(name).expanduser()
    is_local = path.exists()
    if name == str(EMBEDDED) and not (path / "config.json").exists():
        raise ModelError(f"model: the embedded model is missing at {EMBEDDED}; train it with "
                         "`python -m dico.train --out assets/dico-tiny` (see assets/dico-tiny/README.md)")
    if not is_local and (name.startswith((".", "/", "~")) or name.count("/") != 1):
        raise ModelError(f"model: {name!r} is neither an existing folder nor a hub id like 'owner/name'")
    config = _local_config(path) if is_local else None
    kind = _kind_of(name, config)
    needs_code = kind != "masked-lm" or bool(config and config.get("auto_map"))
    if needs_code and name not in KNOWN_REMOTE and not trust_remote_code:
        raise ModelError(f"model: {name!r} ships its own code; pass trust_remote_code=True (CLI: --trust-remote-code) "
                         f"if you trust it. Known ids: {', '.join(sorted(KNOWN_REMOTE))}")
    dev, dt = default_device_dtype(device, dtype)
    label = EMBEDDED_NAME if name == str(EMBEDDED) else name
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=needs_code)
        if kind == "masked-lm":
            # eager for attention maps, and for relative positions (sdpa would warn and fall back anyway)
            relative = (config or {}).get("position_embedding_type", "absolute") != "absolute"
            kwargs = {"attn_implementation": "eager"} if attention or relative else {}
            model = AutoModelForMaskedLM.from_pretrained(name, dtype=dt, trust_remote_code=needs_code, **kwargs)
            mask_id = tokenizer.mask_token_id
            if mask_id is None:
                raise ModelError(f"model: {label!r} has no mask token in its tokenizer; it is not a masked LM")
        else:
            model = AutoModel.from_pretrained(name, dtype=dt, trust_remote_code=True)
            mask_id = LLADA_MASK_ID if kind == "llada" else DREAM_MASK_ID
    except ModelError:
        raise
    except (OSError, ValueError, ImportError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"model: cannot load {label!r} ({first}). Hub models need network access or a local "
                         "copy; LLaDA and Dream need a GPU with about 20 GB of memory") from None
    model.to(dev).eval()
    cfg = model.config
    max_length = int(getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "max_sequence_length", None) or 4096)
    chat = kind != "masked-lm" and "instruct" in name.lower() and getattr(tokenizer, "chat_template", None) is not None
    return MaskPredictor(name=label, kind=kind, model=model, tokenizer=tokenizer, mask_id=int(mask_id),
                         max_length=max_length, chat=chat, supports_attention=(kind == "masked-lm" and attention),
                         device=dev)


def from_module(model: torch.nn.Module, tokenizer, *, kind: str, mask_id: int, max_length: int, name: str = "custom",
                chat: bool = False) -> MaskPredictor:
    """Wrap an already built module (tests' stand-ins, or a model loaded by hand) as a mask predictor."""
    if kind not in ("masked-lm", "llada", "dream"):
        raise ModelError(f"kind: unknown model kind {kind!r}; choose masked-lm, llada or dream")
    return MaskPredictor(name=name, kind=kind, model=model.eval(), tokenizer=tokenizer, mask_id=mask_id,
                         max_length=max_length, chat=chat, supports_attention=False)
