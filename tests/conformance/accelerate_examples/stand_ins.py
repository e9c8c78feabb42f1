"""What Accelerate's examples download, made here: the same calls, on small synthetic data.

Accelerate's examples load GLUE MRPC with ``datasets``, ``bert-base-cased`` with
``transformers``, the GLUE metric with ``evaluate`` and, for the vision examples, the Oxford
pets images with PIL, ``torchvision`` transforms and a ``timm`` ResNet. Nothing can be downloaded
here (and ``datasets``, ``evaluate``, ``timm``, ``torchvision``, scikit-learn and Pillow are not
installed),
so each example imports these stand-ins under the same names instead, on both sides alike:

- ``load_dataset("nyu-mll/glue", "mrpc")``: sentence pairs over a 40-word vocabulary, made
  from a fixed ``random.Random`` (never the global generators the scripts seed), 48 training
  and 41 validation rows (41: the last evaluation batch is short, so ``gather_for_metrics``
  drops repeated samples); label 1 when the second sentence reorders the first's words;
- ``AutoTokenizer.from_pretrained(...)``: a real ``transformers`` fast tokenizer over that
  vocabulary, built in memory (word-level, BERT's ``[CLS] a [SEP] b [SEP]`` template);
- ``AutoModelForSequenceClassification.from_pretrained(...)``: a real
  ``BertForSequenceClassification`` from a tiny ``BertConfig`` (2 layers of width 16),
  initialised from the global generator as the scripts seed it;
- for the autoregressive example, ``load_dataset("Salesforce/wikitext", ...)``: 520 training and
  90 validation lines over the same words, most of them empty as in wikitext, a tokenizer with an
  end-of-text token, and a real ``LlamaForCausalLM`` from a tiny ``LlamaConfig``;
- ``evaluate.load("glue", "mrpc")``: accuracy and F1 of the gathered predictions;
- ``StratifiedKFold`` (scikit-learn's, for ``cross_validation``): folds cut class by class,
  without shuffling;
- ``PIL.Image.open``, ``create_model``, ``Compose``/``RandomResizedCrop``/``Resize``/
  ``ToTensor``: 40 images of 24x24 pixels named like the pets files, drawn from their file
  name, a 3-channel convolution and a linear classifier, transforms drawing from torch's
  generator as torchvision's do.

Every model made is kept in :data:`MODELS`, so the runner can read the final weights.
"""

from __future__ import annotations

import hashlib
import random
from types import SimpleNamespace
from typing import Any

import torch

MODELS: list[torch.nn.Module] = []

WORDS = [f"w{i}" for i in range(40)]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


# -- datasets ------------------------------------------------------------------------------------


class Dataset(torch.utils.data.Dataset):  # type: ignore[misc]
    """Columns of equal length; a row is a dict (what ``datasets.Dataset`` gives a DataLoader)."""

    def __init__(self, columns: dict[str, list[Any]]) -> None:
        self.columns = columns

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def __getitem__(self, index: int | str) -> Any:
        if isinstance(index, str):
            return list(self.columns[index])  # a column, as datasets gives it
        return {name: values[index] for name, values in self.columns.items()}

    @property
    def column_names(self) -> list[str]:
        return list(self.columns)

    @property
    def num_rows(self) -> int:
        return len(self)

    def map(
        self, function: Any, batched: bool = False, remove_columns: list[str] | None = None
    ) -> Dataset:
        assert batched, "the examples map in batches"
        columns = dict(self.columns)
        columns.update({k: list(v) for k, v in function(dict(self.columns)).items()})
        for name in remove_columns or ():
            del columns[name]
        return Dataset(columns)

    def rename_column(self, old: str, new: str) -> Dataset:
        return Dataset({new if k == old else k: v for k, v in self.columns.items()})

    def filter(self, function: Any, input_columns: str) -> Dataset:
        keep = [i for i, value in enumerate(self.columns[input_columns]) if function(value)]
        return self.select(keep)

    def select(self, indices: Any) -> Dataset:
        return Dataset({k: [v[int(i)] for i in indices] for k, v in self.columns.items()})


class DatasetDict(dict[str, Dataset]):
    def map(self, function: Any, **kwargs: Any) -> DatasetDict:
        return DatasetDict({k: v.map(function, **kwargs) for k, v in self.items()})

    def rename_column(self, old: str, new: str) -> DatasetDict:
        return DatasetDict({k: v.rename_column(old, new) for k, v in self.items()})

    def filter(self, function: Any, **kwargs: Any) -> DatasetDict:
        return DatasetDict({k: v.filter(function, **kwargs) for k, v in self.items()})


def _pairs(rng: random.Random, count: int, start: int) -> Dataset:
    columns: dict[str, list[Any]] = {"sentence1": [], "sentence2": [], "label": [], "idx": []}
    for i in range(count):
        first = rng.sample(WORDS, rng.randint(3, 8))
        label = rng.randint(0, 1)
        second = rng.sample(first, len(first)) if label else rng.sample(WORDS, rng.randint(3, 8))
        columns["sentence1"].append(" ".join(first))
        columns["sentence2"].append(" ".join(second))
        columns["label"].append(label)
        columns["idx"].append(start + i)
    return Dataset(columns)


def _lines(rng: random.Random, count: int, every: int) -> Dataset:
    # Like wikitext: most lines are empty, one in ``every`` is a sentence.
    text = [
        " ".join(rng.choices(WORDS, k=rng.randint(3, 9))) if i % every == 0 else ""
        for i in range(count)
    ]
    return Dataset({"text": text})


def load_dataset(path: str, name: str | None = None, **kwargs: Any) -> DatasetDict:
    """GLUE MRPC's splits, or wikitext's, synthetic (see the module docstring)."""
    rng = random.Random(0)
    if (path, name) == ("Salesforce/wikitext", "wikitext-2-v1"):
        return DatasetDict({"train": _lines(rng, 520, 13), "validation": _lines(rng, 90, 5)})
    assert (path, name) == ("nyu-mll/glue", "mrpc"), (path, name)
    return DatasetDict({"train": _pairs(rng, 48, 0), "validation": _pairs(rng, 41, 1000)})


# -- transformers --------------------------------------------------------------------------------


class AutoTokenizer:
    @staticmethod
    def from_pretrained(name: str, **kwargs: Any) -> Any:
        """A word-level fast tokenizer over :data:`WORDS`, built in memory: BERT-style, or
        SmolLM-style (an end-of-text token, no template) for ``HuggingFaceTB/SmolLM-360M``."""
        from tokenizers import Tokenizer, models, pre_tokenizers, processors
        from transformers import PreTrainedTokenizerFast

        vocab = {w: i for i, w in enumerate(SPECIALS + WORDS)}
        backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        backend.pre_tokenizer = pre_tokenizers.Whitespace()
        if name == "HuggingFaceTB/SmolLM-360M":
            return PreTrainedTokenizerFast(
                tokenizer_object=backend,
                unk_token="[UNK]",
                eos_token="[SEP]",
                model_max_length=64,
                model_input_names=["input_ids", "attention_mask"],
            )
        backend.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
        )
        return PreTrainedTokenizerFast(
            tokenizer_object=backend,
            unk_token="[UNK]",
            pad_token="[PAD]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            mask_token="[MASK]",
            model_max_length=64,
            model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        )


def _bert_config(**kwargs: Any) -> Any:
    from transformers import BertConfig

    return BertConfig(
        vocab_size=len(SPECIALS) + len(WORDS),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        **kwargs,
    )


class AutoModelForSequenceClassification:
    @staticmethod
    def from_pretrained(name: str, return_dict: bool = True, **kwargs: Any) -> Any:
        """A tiny ``BertForSequenceClassification`` (2 labels), initialised from torch's RNG."""
        from transformers import BertForSequenceClassification

        model = BertForSequenceClassification(_bert_config(return_dict=return_dict, **kwargs))
        MODELS.append(model)
        return model


class AutoModelForCausalLM:
    @staticmethod
    def from_pretrained(name: str, **kwargs: Any) -> Any:
        """A tiny ``LlamaForCausalLM`` (2 layers of width 16), initialised from torch's RNG."""
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            vocab_size=len(SPECIALS) + len(WORDS),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=64,
        )
        model = LlamaForCausalLM(config)
        MODELS.append(model)
        return model


class _Metric:
    """GLUE MRPC's metric: accuracy and F1 over what ``add_batch`` received."""

    def __init__(self) -> None:
        self.predictions: list[int] = []
        self.references: list[int] = []

    def add_batch(self, predictions: Any, references: Any) -> None:
        self.predictions += [int(p) for p in predictions]
        self.references += [int(r) for r in references]

    def compute(self, predictions: Any = None, references: Any = None) -> dict[str, float]:
        if predictions is not None:
            self.add_batch(predictions=predictions, references=references)
        pairs = list(zip(self.predictions, self.references, strict=True))
        self.predictions, self.references = [], []
        tp = sum(1 for p, r in pairs if p == r == 1)
        fp = sum(1 for p, r in pairs if p == 1 and r == 0)
        fn = sum(1 for p, r in pairs if p == 0 and r == 1)
        accuracy = sum(1 for p, r in pairs if p == r) / len(pairs)
        f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
        return {"accuracy": accuracy, "f1": f1}


evaluate = SimpleNamespace(load=lambda *args, **kwargs: _Metric())


class StratifiedKFold:
    """scikit-learn's splitter without shuffling: each class's rows cut into ``n_splits`` runs."""

    def __init__(self, n_splits: int = 5) -> None:
        self.n_splits = n_splits

    def split(self, features: Any, labels: list[int]) -> Any:
        folds: list[list[int]] = [[] for _ in range(self.n_splits)]
        for label in sorted(set(labels)):
            rows = [i for i, y in enumerate(labels) if y == label]
            for k in range(self.n_splits):
                folds[k] += rows[
                    k * len(rows) // self.n_splits : (k + 1) * len(rows) // self.n_splits
                ]
        for k in range(self.n_splits):
            held = set(folds[k])
            yield [i for i in range(len(labels)) if i not in held], sorted(held)


# -- vision --------------------------------------------------------------------------------------

PETS = ["abyssinian", "beagle", "havanese"]


def write_pets(folder: Any, count: int = 40) -> None:
    """Empty ``<breed>_<n>.jpg`` files: the image of each is drawn from its name on opening."""
    for i in range(count):
        (folder / f"{PETS[i % len(PETS)]}_{i}.jpg").write_bytes(b"")


class _Image:
    def __init__(self, pixels: torch.Tensor) -> None:
        self.pixels = pixels  # height x width x 3, uint8

    def convert(self, mode: str) -> _Image:
        assert mode == "RGB"
        return self


def _open(fname: str) -> _Image:
    seed = int.from_bytes(hashlib.sha256(str(fname).rsplit("/", 1)[-1].encode()).digest()[:8])
    generator = torch.Generator().manual_seed(seed)
    return _Image(torch.randint(0, 256, (24, 24, 3), generator=generator, dtype=torch.uint8))


PIL = SimpleNamespace(Image=SimpleNamespace(open=_open))


def _resize(image: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    chw = image.permute(2, 0, 1)[None].float()
    out = torch.nn.functional.interpolate(chw, size=size, mode="bilinear", align_corners=False)
    return out[0].permute(1, 2, 0).round().clamp(0, 255).to(torch.uint8)


class Compose:
    def __init__(self, transforms: list[Any]) -> None:
        self.transforms = transforms

    def __call__(self, image: Any) -> Any:
        for transform in self.transforms:
            image = transform(image)
        return image


class RandomResizedCrop:
    """A square crop of a random share (``scale``) of the area, resized: torch's generator."""

    def __init__(self, size: tuple[int, int], scale: tuple[float, float] = (0.08, 1.0)) -> None:
        self.size, self.scale = size, scale

    def __call__(self, image: _Image) -> _Image:
        height, width, _ = image.pixels.shape
        share = torch.empty(1).uniform_(self.scale[0], self.scale[1]).item()
        side = max(1, round((share * height * width) ** 0.5))
        top = int(torch.randint(0, height - side + 1, size=(1,)).item())
        left = int(torch.randint(0, width - side + 1, size=(1,)).item())
        crop = image.pixels[top : top + side, left : left + side]
        return _Image(_resize(crop, self.size))


class Resize:
    def __init__(self, size: tuple[int, int]) -> None:
        self.size = size

    def __call__(self, image: _Image) -> _Image:
        return _Image(_resize(image.pixels, self.size))


class ToTensor:
    def __call__(self, image: _Image) -> torch.Tensor:
        return image.pixels.permute(2, 0, 1).float() / 255


class _PetsNet(torch.nn.Module):
    """A convolution, pooling and a linear classifier (``get_classifier``), timm-style."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 4, kernel_size=8, stride=8)
        self.head = torch.nn.Linear(4, num_classes)
        self.default_cfg = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}

    def get_classifier(self) -> torch.nn.Module:
        return self.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = torch.relu(self.stem(x)).mean(dim=(2, 3))
        return self.head(features)


def create_model(name: str, pretrained: bool = False, num_classes: int = 1000) -> torch.nn.Module:
    """The pets network for ``num_classes`` breeds, initialised from torch's generator."""
    model = _PetsNet(num_classes)
    MODELS.append(model)
    return model


def mocked_dataloaders(*args: Any, **kwargs: Any) -> Any:
    """Accelerate's test fixture (``TESTING_MOCKED_DATALOADERS=1``), which downloads: not here."""
    raise RuntimeError("mocked_dataloaders downloads a tokenizer; the stand-ins replace it")


mocked_dataloaders_for_autoregressive_models = mocked_dataloaders
