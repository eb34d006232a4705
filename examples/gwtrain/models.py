"""The models: a small CNN for digits, a ResNet with batch norm for Fashion-MNIST, and a
byte-level transformer (embeddings, layer norm, causal attention) for the text corpus."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def digits_cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 64 x 4 x 4
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 128), nn.ReLU(),
        nn.Linear(128, 10))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


def resnet(widths=(24, 48, 96, 192), classes=10):
    """ResNet for 28x28 images: a 3x3 stem, four basic blocks (28 -> 14 -> 7 -> 4 -> 2 pixels),
    global average pooling, one linear layer. 692,674 parameters with the default widths."""
    w = widths
    return nn.Sequential(
        nn.Conv2d(1, w[0], 3, 1, 1, bias=False), nn.BatchNorm2d(w[0]), nn.ReLU(),
        BasicBlock(w[0], w[0], 2), BasicBlock(w[0], w[1], 2), BasicBlock(w[1], w[2], 2),
        BasicBlock(w[2], w[3], 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w[3], classes))


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class TransformerBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ByteTransformer(nn.Module):
    """A GPT-style language model over bytes (vocabulary 256): token and position
    embeddings, pre-norm blocks, a final layer norm and an untied output layer."""

    def __init__(self, d=192, layers=4, heads=4, context=64):
        super().__init__()
        self.tok = nn.Embedding(256, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.Sequential(*[TransformerBlock(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, 256)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        return self.head(self.ln(self.blocks(x)))
