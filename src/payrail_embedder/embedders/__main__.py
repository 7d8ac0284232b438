"""python -m payrail_embedder.embedders: exports the bundled model's ONNX graph if this machine has
none yet (./scripts/setup runs it, so no command has to), and prints where it is."""

from .local_model import LOCAL_DEFAULT_MODEL, bundled_graph_dir, load_bundled
from .protocol import EmbeddingUnavailable

try:
    load_bundled()
except EmbeddingUnavailable as error:
    raise SystemExit(f"error: {error}") from error
print(f"{LOCAL_DEFAULT_MODEL} for ONNX Runtime: {bundled_graph_dir()}")
