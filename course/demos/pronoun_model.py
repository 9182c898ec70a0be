"""The pronoun model of the attention viewer (``course/viz.py``): attention that had to learn content.

Task: in a sentence of Chinese or English, say which earlier noun the pronoun refers to.
The sentences come from templates (below) with one to three clauses before the pronoun,
so the antecedent sits anywhere from 2 to 24 words back; other nouns (the
distractors) sit before it, between it and the pronoun, and after the pronoun. Exactly
one noun before the pronoun agrees with it: 他 / he a male person, 她 / she a female
one, 它 / it a thing or an animal. Neither the nearest noun nor a fixed offset is the
answer, so position does not solve it: the pronoun has to look for the noun that
agrees with it, by content.

The model is one self-attention layer, the course's own ``MultiHeadAttention``
(``solutions/multi_head.py``, or a student's): token and learned position embeddings,
the attention, and a linear readout of the antecedent's word at the pronoun. There is
no residual path, so the pronoun learns the answer only through its attention weights.
Only the pronouns are trained: the other words' rows of the weights are whatever
training left there.

Words: Chinese is segmented by longest match against the course's own small dictionary
(the Chinese words of ``VOCAB``): the templates are its only text, so every word they
write is in it, and nothing is downloaded (jieba, the usual segmenter, ships a 5 MB
dictionary of its own and would still cut some of these words differently from the
vocabulary). A character outside the dictionary is a word of its own (狗咬人 -> 狗 / 咬 /
人); a word outside the vocabulary reads as ``<unk>``. English is split on spaces.

The weights ship in ``weights/pronoun_model.safetensors``, rebuilt by
``python -m course.demos.train_pronoun_model``: the same weights from one torch on one kind
of CPU, a model that answers the same on another (float rounding differs between CPUs).
"""
from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ._common import Units, load_units, seeded, torch_threads

WEIGHTS = Path(__file__).resolve().parent / "weights" / "pronoun_model.safetensors"
SEEDS = ("我吃了一个苹果，它很甜", "John went to the market because he wanted bread")
MAX_LEN = 32
STEPS = 1000
SEED = 0
IGNORE = -100
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uf900-\ufaff\uff00-\uffef]")

# Nouns by the pronoun that agrees with them: "he" (male), "she" (female), "it" (things, animals).
EN_NAMES = {"he": ["John", "Tom", "Peter", "David", "Mike", "Sam"],
            "she": ["Mary", "Anna", "Lucy", "Emma", "Sarah", "Kate"]}
EN_PEOPLE = {"he": ["boy", "man", "father", "brother", "king", "uncle"],
             "she": ["girl", "woman", "mother", "sister", "queen", "aunt"]}
EN_PLACES = ["market", "shop", "park", "house", "school", "station"]
EN_THINGS = ["book", "car", "box", "dog", "cat", "ball", "cup", "letter", "bike", "apple"]
EN_FOOD = ["bread", "cake", "tea", "milk", "rice", "soup"]  # said without an article
ZH_NAMES = {"他": ["小明", "小刚", "小军", "小强"], "她": ["小红", "小丽", "小芳", "小美"]}
ZH_PEOPLE = {"他": ["爸爸", "哥哥", "弟弟", "爷爷", "叔叔", "男孩"],
             "她": ["妈妈", "姐姐", "妹妹", "奶奶", "阿姨", "女孩"]}
ZH_PLACES = ["市场", "商店", "公园", "学校", "车站"]
# Each thing with its measure word (一个苹果, 一本书).
ZH_THINGS = {"苹果": "一个", "面包": "一个", "蛋糕": "一个", "西瓜": "一个", "杯子": "一个", "箱子": "一个",
             "书": "一本", "车": "一辆", "自行车": "一辆", "猫": "一只", "狗": "一只", "信": "一封"}
ZH_FOOD = ["苹果", "面包", "蛋糕", "西瓜"]

EN_WORDS = ("I we the a an to and so but because when after then went bought found liked saw met called "
            "helped gave wanted was tired hungry happy sweet old new big small nice home there").split()
ZH_WORDS = ("我 我们 你 去 了 吃 买 看见 找到 遇见 帮助 给 把 想要 很 回家 ， 因为 所以 但是 然后 "
            "甜 大 小 旧 新 贵 好 累 饿 高兴").split()
PRONOUNS = {"en": ("he", "she", "it"), "zh": ("他", "她", "它")}


def _vocabulary() -> list[str]:
    words = ["<pad>", "<unk>"]
    for group in (*EN_NAMES.values(), *EN_PEOPLE.values(), EN_PLACES, EN_THINGS, EN_FOOD, EN_WORDS,
                  PRONOUNS["en"], *ZH_NAMES.values(), *ZH_PEOPLE.values(), ZH_PLACES, ZH_THINGS,
                  set(ZH_THINGS.values()), ZH_WORDS, PRONOUNS["zh"]):
        words += sorted(w for w in group if w not in words)
    return words


VOCAB = _vocabulary()
INDEX = {word: i for i, word in enumerate(VOCAB)}
PAD, UNK = INDEX["<pad>"], INDEX["<unk>"]
_DICTIONARY = {w for w in VOCAB if _CJK.search(w)}
_LONGEST = max(len(w) for w in _DICTIONARY)


def segment(text: str) -> list[str]:
    """The words of ``text``: split on spaces; a piece in Chinese is cut by longest match against
    the course dictionary, a character it does not know standing alone."""
    words = []
    for piece in text.split():
        if not _CJK.search(piece):
            words.append(piece)
            continue
        start = 0
        while start < len(piece):
            end = next(end for end in range(min(len(piece), start + _LONGEST), start, -1)
                       if piece[start:end] in _DICTIONARY or end == start + 1)
            words.append(piece[start:end])
            start = end
    return words


def token_ids(words: list[str]) -> torch.Tensor:
    """Each word's index in VOCAB (a capitalised English word also as its lower case): (1, L) long."""
    return torch.tensor([[INDEX.get(w, INDEX.get(w.lower(), UNK)) for w in words]])


# ---------------------------------------------------------------- the sentences

@dataclass
class Example:
    words: list[str]
    pronoun: int  # index of the pronoun in words
    antecedent: int  # index of the noun it refers to
    nouns: list[int]  # indices of every noun, the antecedent and the distractors


class _Sentence:
    """Words being written, and where each noun went with the pronoun that agrees with it."""

    def __init__(self):
        self.words: list[str] = []
        self.nouns: list[tuple[int, str]] = []  # (index in words, "he" | "she" | "it")

    def add(self, *words: str):
        self.words += words

    def noun(self, word: str, agrees: str):
        self.nouns.append((len(self.words), agrees))
        self.words.append(word)


def _en_person(s: _Sentence, rng: random.Random, subject: bool = False):
    if subject and rng.random() < 0.2:
        return s.add(rng.choice(["I", "we"]))  # a person, but no candidate for he or she
    agrees = rng.choice(["he", "she"])
    if rng.random() < 0.5:
        return s.noun(rng.choice(EN_NAMES[agrees]), agrees)
    s.add("the")
    s.noun(rng.choice(EN_PEOPLE[agrees]), agrees)


def _en_thing(s: _Sentence, rng: random.Random):
    word = rng.choice(EN_THINGS)
    s.add("an" if word[0] in "aeiou" else rng.choice(["the", "a"]))
    s.noun(word, "it")


def _en_clause(s: _Sentence, rng: random.Random):
    _en_person(s, rng, subject=True)
    kind = rng.randrange(5)
    if kind == 0:  # John went to the market
        s.add("went", "to", "the")
        s.noun(rng.choice(EN_PLACES), "it")
    elif kind == 1:  # Mary bought a book / bread
        s.add(rng.choice(["bought", "found", "liked", "saw"]))
        if rng.random() < 0.3:
            s.noun(rng.choice(EN_FOOD), "it")
        else:
            _en_thing(s, rng)
    elif kind == 2:  # Tom met the girl
        s.add(rng.choice(["met", "called", "helped", "saw"]))
        _en_person(s, rng)
    elif kind == 3:  # the boy gave Anna a cup
        s.add("gave")
        _en_person(s, rng)
        _en_thing(s, rng)
    else:  # Kate gave the box to her aunt
        s.add("gave")
        _en_thing(s, rng)
        s.add("to")
        _en_person(s, rng)


def _en_after(s: _Sentence, rng: random.Random, pronoun: str):
    if pronoun == "it" or rng.random() < 0.5:
        return s.add("was", rng.choice(["old", "new", "big", "small", "nice", "there", "happy", "tired", "hungry",
                                        "sweet"]))
    if rng.random() < 0.5:
        return s.add("went", "home")
    s.add("wanted")
    s.noun(rng.choice(EN_FOOD), "it")  # a distractor after the pronoun: John ... he wanted bread


def _zh_person(s: _Sentence, rng: random.Random, subject: bool = False):
    if subject and rng.random() < 0.2:
        return s.add(rng.choice(["我", "我们", "你"]))
    agrees = rng.choice(["他", "她"])
    s.noun(rng.choice(ZH_NAMES[agrees] if rng.random() < 0.5 else ZH_PEOPLE[agrees]), agrees)


def _zh_thing(s: _Sentence, rng: random.Random, words: list[str] | None = None, counted: bool = True):
    word = rng.choice(words or list(ZH_THINGS))
    if counted:
        s.add(ZH_THINGS[word])
    s.noun(word, "它")


def _zh_clause(s: _Sentence, rng: random.Random):
    _zh_person(s, rng, subject=True)
    kind = rng.randrange(5)
    if kind == 0:  # 小明去了市场
        s.add("去", "了")
        s.noun(rng.choice(ZH_PLACES), "它")
    elif kind == 1:  # 我吃了一个苹果
        verb = rng.choice(["吃", "买", "看见", "找到"])
        s.add(verb, "了")
        _zh_thing(s, rng, ZH_FOOD if verb == "吃" else None)
    elif kind == 2:  # 小红遇见了哥哥
        s.add(rng.choice(["遇见", "帮助", "看见"]), "了")
        _zh_person(s, rng)
    elif kind == 3:  # 爸爸给了妹妹一本书
        s.add("给", "了")
        _zh_person(s, rng)
        _zh_thing(s, rng)
    else:  # 小芳把书给了弟弟
        s.add("把")
        _zh_thing(s, rng, counted=False)
        s.add("给", "了")
        _zh_person(s, rng)


def _zh_after(s: _Sentence, rng: random.Random, pronoun: str):
    if pronoun == "它" or rng.random() < 0.5:
        return s.add("很", rng.choice(["甜", "大", "小", "旧", "新", "贵", "好", "累", "饿", "高兴"]))
    if rng.random() < 0.5:
        return s.add("回家", "了")
    s.add("想要")
    _zh_thing(s, rng, ZH_FOOD, counted=False)  # 小明去了市场，因为他想要面包


_LANGUAGES = {
    "en": (_en_clause, _en_after, ["and", "so", "but", "because", "when", "after", "then"], ()),
    "zh": (_zh_clause, _zh_after, ["因为", "所以", "但是", "然后", ""], ("，",)),
}


def sentence(rng: random.Random, lang: str) -> Example:
    """One sentence in ``lang`` ("en" or "zh") whose pronoun has exactly one agreeing noun before it,
    and none after it (rejection sampling)."""
    clause, after, links, comma = _LANGUAGES[lang]
    while True:
        s = _Sentence()
        for n in range(rng.randint(1, 3)):
            if n:
                s.add(*comma, *filter(None, [rng.choice(links)]))
            clause(s, rng)
        pronoun = rng.choice(PRONOUNS[lang])
        candidates = [i for i, agrees in s.nouns if agrees == pronoun]
        if len(candidates) != 1:
            continue
        s.add(*comma, *filter(None, [rng.choice(links)]))
        at = len(s.words)
        s.add(pronoun)
        after(s, rng, pronoun)
        if any(agrees == pronoun for i, agrees in s.nouns if i > at):
            continue
        if len(s.words) <= MAX_LEN and "".join(s.words) not in {w.replace(" ", "") for w in SEEDS}:
            return Example(s.words, at, candidates[0], [i for i, _ in s.nouns])  # the seeds stay out: the viewer shows them unseen


def batch(rng: random.Random, size: int):
    """``size`` sentences, half Chinese, padded: ids (B, L), padding (B, L) bool, targets (B, L) with the
    antecedent's word at the pronoun and IGNORE elsewhere, and the examples."""
    examples = [sentence(rng, "zh" if n % 2 else "en") for n in range(size)]
    length = max(len(e.words) for e in examples)
    ids = torch.full((size, length), PAD)
    targets = torch.full((size, length), IGNORE)
    for n, e in enumerate(examples):
        ids[n, :len(e.words)] = token_ids(e.words)[0]
        targets[n, e.pronoun] = ids[n, e.antecedent]
    return ids, ids == PAD, targets, examples


# ---------------------------------------------------------------- the model

class PronounModel(nn.Module):
    """Token + learned position embeddings, one ``MultiHeadAttention``, a readout of the antecedent."""

    def __init__(self, multi_head, *, dim: int = 32, heads: int = 1, vocab: int = len(VOCAB),
                 max_len: int = MAX_LEN):
        super().__init__()
        self.max_len = max_len
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(max_len, dim)
        self.attn = multi_head.MultiHeadAttention(dim, heads)
        self.readout = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor, padding: torch.Tensor | None = None):
        """ids (B, L) long, padding None or (B, L) bool -> (logits (B, L, V), weights (B, H, L, L))."""
        if ids.shape[-1] > self.max_len:
            raise ValueError(f"the pronoun model reads at most {self.max_len} words, got {ids.shape[-1]}")
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[-1], device=ids.device))  # (B, L, E)
        out, weights = self.attn(x, key_padding_mask=padding, average_attn_weights=False)  # (B, L, E), (B, H, L, L)
        return self.readout(out), weights


@dataclass
class Trained:
    model: PronounModel
    accuracy: float  # the antecedent named right, on fresh sentences
    attention_accuracy: float  # the antecedent is the pronoun's most attended word (mean of the heads)
    steps: int


def evaluate(model: PronounModel, seed: int = SEED + 1, size: int = 512) -> tuple[float, float]:
    """(readout accuracy, attention accuracy) on ``size`` fresh sentences."""
    ids, padding, targets, examples = batch(random.Random(seed), size)
    model.eval()
    with torch.no_grad():
        logits, weights = model(ids, padding)
    rows = torch.arange(size)
    pronouns = torch.tensor([e.pronoun for e in examples])
    antecedents = torch.tensor([e.antecedent for e in examples])
    named = logits[rows, pronouns].argmax(-1) == targets[rows, pronouns]
    looked = weights.mean(1)[rows, pronouns].argmax(-1) == antecedents  # (B,): heads averaged
    return float(named.float().mean()), float(looked.float().mean())


def train_pronoun_model(units: Units | None = None, *, steps: int = STEPS, batch_size: int = 128,
                        seed: int = SEED) -> Trained:
    """Train the pronoun model from ``seed`` (one torch thread, so the result is reproducible)."""
    with torch_threads(1):
        multi_head = (load_units() if units is None else units).need("multi_head")
        seeded(seed)
        rng = random.Random(seed)
        model = PronounModel(multi_head)
        optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
        loss_fn = nn.CrossEntropyLoss(ignore_index=IGNORE)
        model.train()
        with torch.enable_grad():
            for _ in range(steps):
                ids, padding, targets, _ = batch(rng, batch_size)
                logits, _ = model(ids, padding)
                loss = loss_fn(logits.flatten(0, 1), targets.flatten())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        return Trained(model, *evaluate(model), steps)


# ---------------------------------------------------------------- the shipped weights

def _metadata(trained: Trained) -> dict[str, str]:
    return {"vocab": json.dumps(VOCAB, ensure_ascii=False), "steps": str(trained.steps),
            "accuracy": f"{trained.accuracy:.4f}", "attention_accuracy": f"{trained.attention_accuracy:.4f}"}


def save_weights(trained: Trained, path: Path = WEIGHTS) -> Path:
    """Write the model's parameters and what they were trained on (safetensors, float32)."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in trained.model.state_dict().items()}, str(path),
              metadata=_metadata(trained))
    return path


def load_weights(path: Path = WEIGHTS) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and metadata of a weights file; ValueError if its vocabulary is not VOCAB."""
    try:
        from safetensors import safe_open
    except ImportError:
        raise ImportError("the viewer's shipped weights need safetensors: pip install 'safetensors>=0.4'") from None
    with safe_open(str(path), framework="pt") as file:
        metadata = file.metadata()
        tensors = {key: file.get_tensor(key) for key in file.keys()}
    if json.loads(metadata.get("vocab", "[]")) != VOCAB:
        raise ValueError(f"{path} was trained on another vocabulary: rebuild it with "
                         "python -m course.demos.train_pronoun_model")
    return tensors, metadata


def shipped_model(units: Units | None = None, path: Path = WEIGHTS) -> Trained:
    """The shipped weights in a model built with ``units``' MultiHeadAttention (default: the reference),
    its accuracies measured with that module (a student's bug shows in them)."""
    tensors, metadata = load_weights(path)
    model = PronounModel((load_units() if units is None else units).need("multi_head"))
    try:
        model.load_state_dict(tensors)
    except RuntimeError as error:  # a MultiHeadAttention whose parameters are not the contract's
        raise ValueError(f"the weights in {path} do not fit this MultiHeadAttention: {error}") from None
    return Trained(model, *evaluate(model), int(metadata["steps"]))


def attention_for(words: list[str], trained: Trained) -> torch.Tensor:
    """The model's per-head weights for a sentence's words: (H, L, L), rows = queries."""
    if len(words) > trained.model.max_len:
        raise ValueError(f"the pronoun model reads at most {trained.model.max_len} words; "
                         f"the sentence has {len(words)}")
    trained.model.eval()
    with torch.no_grad():
        _, weights = trained.model(token_ids(words))
    return weights[0]
