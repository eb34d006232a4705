"""The datasets, all found on a Debian machine without downloads:

- digits: scikit-learn's 1,797 8x8 handwritten digits (python3-sklearn), split 80/20 stratified.
- fashion: Fashion-MNIST, 60,000 training and 10,000 test 28x28 images as IDX files
  (dataset-fashion-mnist, /usr/share/datasets/fashion-mnist/).
- text: Debian's Python 3.11 standard library sources (python3.11-minimal and libpython3.11-stdlib:
  /usr/lib/python3.11/**/*.py, its test suite left out) as bytes; every 20th file (sorted by
  path) is the validation set.
"""
import glob
import gzip
import os

import numpy as np

FASHION_DIR = "/usr/share/datasets/fashion-mnist"


def digits(seed):
    """(Xtr, Xte, ytr, yte): pixels scaled to [0, 1], shape (n, 1, 8, 8)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    d = load_digits()
    X = (d.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = d.target.astype(np.int64)
    return train_test_split(X, y, test_size=0.2, random_state=seed, stratify=y)


def _idx(path):
    """One IDX file (gzip'd): a big-endian header of dimensions, then unsigned bytes."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError("%s: not an IDX file of unsigned bytes" % path)
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError("%s: %d bytes of data for dimensions %s" % (path, data.size, dims))
    return data.reshape(dims)


def fashion(directory=FASHION_DIR):
    """(Xtr, Xte, ytr, yte): pixels normalized with the training set's mean and deviation,
    shape (n, 1, 28, 28)."""
    if not os.path.isdir(directory):
        raise SystemExit("Fashion-MNIST is not in %s: apt-get install dataset-fashion-mnist" % directory)
    Xtr = _idx(os.path.join(directory, "train-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    Xte = _idx(os.path.join(directory, "t10k-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    ytr = _idx(os.path.join(directory, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    yte = _idx(os.path.join(directory, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
    mean, std = float(Xtr.mean()), float(Xtr.std())
    norm = lambda X: ((X - mean) / std).reshape(-1, 1, 28, 28)  # noqa: E731
    return norm(Xtr), norm(Xte), ytr, yte


TEXT_DIR = "/usr/lib/python3.11"


def text(directory=TEXT_DIR):
    """(train, validation, description): the standard library's .py files as uint8 arrays."""
    files = sorted(p for p in glob.glob(os.path.join(directory, "**", "*.py"), recursive=True)
                   if os.sep + "test" + os.sep not in p[len(directory):] and "-packages" not in p)
    if not files:
        raise SystemExit("no Python sources under %s" % directory)
    train, val = [], []
    for i, p in enumerate(files):
        with open(p, "rb") as f:
            (val if i % 20 == 0 else train).append(f.read())
    tr = np.frombuffer(b"".join(train), dtype=np.uint8)
    va = np.frombuffer(b"".join(val), dtype=np.uint8)
    about = "%s: %d .py files, %.1f MB (%.1f MB training, %.2f MB validation)" % (
        directory, len(files), (tr.size + va.size) / 1e6, tr.size / 1e6, va.size / 1e6)
    return tr, va, about
