"""The models and data sets of perf/train_real.py: real networks on data that Debian's packages
ship, so that no run downloads anything.

  mlp   scikit-learn's digits (python3-sklearn: 1797 8x8 images, 10 classes), a 3-layer MLP;
        metric: test accuracy (%).
  cnn   the same digits as 1x8x8 images, two 3x3 convolutions, max-pooling and two linear
        layers; metric: test accuracy (%).
  transformer
        a character language model (embedding and learned positions, one causal transformer
        layer, a linear decoder) on the license texts every Debian system has in
        /usr/share/common-licenses (base-files); metric: test perplexity per character (lower
        is better). An LSTM of the same size ran 230 ms a step here (4 ranks on 2 cores), too
        slow for a grid of runs.
  wordlm
        a word-level language model whose parameters are almost all one large embedding, so
        that its all-reduce, not its arithmetic, bounds a step at 1 Gbit/s: the previous word,
        and the hashes of the previous two and three words, index one table of 2^17 rows of
        width 96 (12.6M parameters), summed, through tanh, into a softmax over the 2000 most
        frequent training words and <unk> (12.8M parameters, 51 MB of fp32 gradient). The text
        is the release notes and technical documentation git ships (/usr/share/doc/git/**/*.txt,
        Debian's git package: 391K words); metric: test perplexity per word (lower is better).
        Each rank's batch touches a few hundred of the table's rows, so its gradient is sparse,
        as a word-level language model's embedding gradient is.

Every Task splits its data the same way on every rank (from the seed), gives each rank its shard
of a global batch, and evaluates on the held-out part.
"""
import math
import os

import torch
from torch import nn

LICENSES = "/usr/share/common-licenses"


class Task:
    """One model on one data set: make(), batch(step, rank, size), loss(model, batch),
    evaluate(model) -> metric; higher_is_better says which way the metric improves."""

    name = ""
    metric = ""
    higher_is_better = True

    def reached(self, value, target):
        return value >= target if self.higher_is_better else value <= target


def _digits(seed):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    x, y = load_digits(return_X_y=True)
    x = x / 16.0  # pixels are 0..16
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    f = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    i = lambda a: torch.tensor(a, dtype=torch.long)  # noqa: E731
    return f(xtr), i(ytr), f(xte), i(yte)


class DigitsTask(Task):
    """Classification of scikit-learn's digits; each epoch a new permutation, each rank its
    shard of every global batch (as DistributedSampler)."""

    metric = "test accuracy (%)"
    higher_is_better = True

    def __init__(self, seed, batch, hidden):
        self.xtr, self.ytr, self.xte, self.yte = _digits(seed)
        self.batch, self.hidden, self.seed = batch, hidden, seed
        self._perm, self._epoch = None, -1

    def batch_of(self, step, rank, size):
        per_epoch = len(self.xtr) // (size * self.batch)
        epoch, k = divmod(step, per_epoch)
        if epoch != self._epoch:
            gen = torch.Generator().manual_seed(self.seed * 100003 + epoch)
            self._perm, self._epoch = torch.randperm(len(self.xtr), generator=gen), epoch
        lo = (k * size + rank) * self.batch
        idx = self._perm[lo:lo + self.batch]
        return self.shape(self.xtr[idx]), self.ytr[idx]

    def shape(self, x):
        return x

    def loss(self, model, batch):
        x, y = batch
        return nn.functional.cross_entropy(model(x), y)

    @torch.no_grad()
    def evaluate(self, model):
        return (model(self.shape(self.xte)).argmax(1) == self.yte).float().mean().item() * 100


class MlpTask(DigitsTask):
    name = "mlp"

    def make(self):
        h = self.hidden
        return nn.Sequential(nn.Linear(64, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(),
                             nn.Linear(h, 10))


class CnnTask(DigitsTask):
    name = "cnn"

    def shape(self, x):
        return x.view(-1, 1, 8, 8)

    def make(self):
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(64 * 4 * 4, self.hidden), nn.ReLU(),
                             nn.Linear(self.hidden, 10))


class CharTransformer(nn.Module):
    """A one-layer causal transformer over characters, with learned positions."""

    def __init__(self, vocab, width, seq):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(seq, width))
        self.layer = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width,
                                                dropout=0.0, batch_first=True)
        self.decode = nn.Linear(width, vocab)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, x):
        n = x.shape[1]
        h = self.embed(x) + self.position[:n]
        return self.decode(self.layer(h, src_mask=self.mask[:n, :n]))


class TextTask(Task):
    """Next-character prediction on the license texts: the last 10% of the text is the test
    set (its first TEST_CHARS characters are evaluated, to keep evaluation cheap); each
    training sample is a random window of seq+1 characters."""

    name = "transformer"
    metric = "test perplexity"
    higher_is_better = False
    TEST_CHARS = 8192

    def __init__(self, seed, batch, hidden, seq=32):
        text = b""
        names = sorted(n for n in os.listdir(LICENSES)
                       if os.path.isfile(os.path.join(LICENSES, n))
                       and not os.path.islink(os.path.join(LICENSES, n)))
        if not names:
            raise RuntimeError(f"transformer: no license texts in {LICENSES} (Debian's base-files "
                               "installs them)")
        for n in names:
            with open(os.path.join(LICENSES, n), "rb") as f:
                text += f.read()
        symbols = sorted(set(text))
        self.vocab = len(symbols)
        index = {b: i for i, b in enumerate(symbols)}
        data = torch.tensor([index[b] for b in text], dtype=torch.long)
        cut = len(data) * 9 // 10
        self.train, self.test = data[:cut], data[cut:cut + self.TEST_CHARS + 1]
        self.batch, self.hidden, self.seq, self.seed = batch, hidden, seq, seed

    def make(self):
        return CharTransformer(self.vocab, self.hidden, self.seq)

    def batch_of(self, step, rank, size):
        gen = torch.Generator().manual_seed(self.seed * 1000003 + step * size + rank)
        starts = torch.randint(0, len(self.train) - self.seq - 1, (self.batch,), generator=gen)
        windows = torch.stack([self.train[s:s + self.seq + 1] for s in starts.tolist()])
        return windows[:, :-1], windows[:, 1:]

    def loss(self, model, batch):
        x, y = batch
        return nn.functional.cross_entropy(model(x).reshape(-1, self.vocab), y.reshape(-1))

    @torch.no_grad()
    def evaluate(self, model):
        n = (len(self.test) - 1) // self.seq * self.seq
        x = self.test[:n].view(-1, self.seq)
        y = self.test[1:n + 1].view(-1, self.seq)
        loss = nn.functional.cross_entropy(model(x).reshape(-1, self.vocab), y.reshape(-1))
        # A diverged run's loss overflows exp: its perplexity is infinite.
        return math.exp(loss.item()) if loss.item() < 700 else math.inf


GIT_DOCS = "/usr/share/doc/git"


class HashedNgramLM(nn.Module):
    """Next word from a sum of embeddings of the previous word and of the hashed previous two
    and three words (one table), through tanh, into a linear softmax."""

    def __init__(self, rows, width, vocab):
        super().__init__()
        self.embed = nn.EmbeddingBag(rows, width, mode="sum")
        self.decode = nn.Linear(width, vocab)

    def forward(self, features):
        return self.decode(torch.tanh(self.embed(features)))


class WordTask(Task):
    """Next-word prediction on git's documentation: words are runs of letters and digits,
    every other non-space character is a word of its own, all lower-cased; the last 10% of the
    words are the test set (its first TEST_WORDS predictions are evaluated, to keep evaluation
    cheap); each training sample is a random position, with the three words before it."""

    name = "wordlm"
    metric = "test perplexity"
    higher_is_better = False
    TEST_WORDS = 2048
    ROWS = 1 << 17  # the embedding table: the vocabulary's rows, then the n-gram hashes
    VOCAB = 2000  # the most frequent training words; the rest are <unk> (index 0)

    def __init__(self, seed, batch, hidden):
        import re
        from collections import Counter
        names = sorted(os.path.join(d, n) for d, _, files in os.walk(GIT_DOCS) for n in files
                       if n.endswith(".txt") and not os.path.islink(os.path.join(d, n)))
        if not names:
            raise RuntimeError(f"wordlm: no text files in {GIT_DOCS} (Debian's git package "
                               "installs them; scripts/install-deps.sh)")
        words = []
        for n in names:
            with open(n, encoding="utf-8", errors="replace") as f:
                words += re.findall(r"[a-z0-9]+|[^\sa-z0-9]", f.read().lower())
        cut = len(words) * 9 // 10
        common = [w for w, _ in Counter(words[:cut]).most_common(self.VOCAB)]
        index = {w: i + 1 for i, w in enumerate(sorted(common))}
        data = torch.tensor([index.get(w, 0) for w in words], dtype=torch.long)
        self.vocab = self.VOCAB + 1
        self.train, self.test = data[:cut], data[cut:cut + self.TEST_WORDS + 3]
        self.batch, self.hidden, self.seed = batch, hidden, seed

    def features(self, context):
        """[n, 3] previous words (oldest first) -> [n, 3] table rows: the last word's own row,
        and the hashes of the last two and last three words into the rows after the vocabulary
        (collisions share a row, as in a hashed n-gram model)."""
        w3, w2, w1 = context[:, 0], context[:, 1], context[:, 2]
        span, prime = self.ROWS - self.vocab, 1000003
        bigram = self.vocab + (w2 * prime + w1) % span
        trigram = self.vocab + ((w3 * prime + w2) * prime + w1 + 1) % span
        return torch.stack([w1, bigram, trigram], 1)

    def make(self):
        return HashedNgramLM(self.ROWS, self.hidden, self.vocab)

    def batch_of(self, step, rank, size):
        gen = torch.Generator().manual_seed(self.seed * 1000003 + step * size + rank)
        at = torch.randint(3, len(self.train), (self.batch,), generator=gen)
        context = torch.stack([at - 3, at - 2, at - 1], 1)
        return self.features(self.train[context]), self.train[at]

    def loss(self, model, batch):
        x, y = batch
        return nn.functional.cross_entropy(model(x), y)

    @torch.no_grad()
    def evaluate(self, model):
        at = torch.arange(3, len(self.test))
        context = torch.stack([at - 3, at - 2, at - 1], 1)
        loss = nn.functional.cross_entropy(model(self.features(self.test[context])),
                                           self.test[at])
        return math.exp(loss.item()) if loss.item() < 700 else math.inf


TASKS = {"mlp": MlpTask, "cnn": CnnTask, "transformer": TextTask, "wordlm": WordTask}
# Per model: (hidden, batch per rank, learning rate, steps, target metric).
DEFAULTS = {"mlp": (512, 32, 0.05, 300, 96.0),
            "cnn": (256, 32, 0.05, 300, 97.0),
            "transformer": (64, 16, 0.3, 300, 14.0),
            "wordlm": (96, 128, 1.0, 300, 130.0)}
