"""A randomly initialised 2-layer BERT with a word-piece vocabulary, saved as a model folder
that ``transformers`` loads offline (text towers of tests and benches)."""

from __future__ import annotations

from pathlib import Path

LETTERS = list("abcdefghijklmnopqrstuvwxyz0123456789.,:;-")


def write_tiny_bert(
    folder: Path, words: list[str], *, hidden: int, max_positions: int, seed: int = 0
) -> Path:
    """Save to ``folder`` a BertModel (2 layers, 2 heads, width ``hidden``, feed-forward
    2 x ``hidden``, ``max_positions`` positions; weights from ``torch.manual_seed(seed)``) and
    its fast tokenizer: the special tokens, ``words`` whole, and every letter, digit and
    punctuation mark alone and as a "##" continuation. Returns ``folder``."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *LETTERS]
    vocab += [f"##{c}" for c in LETTERS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=max_positions,
    )
    BertModel(config).save_pretrained(folder)
    BertTokenizerFast(str(folder / "vocab.txt")).save_pretrained(folder)  # keyword is ignored
    return folder
