"""Makes the test assets torchtitan's debug configs read and its wheel does not ship, in a folder of our own:

    tests/assets/tokenizer/tokenizer.json, tokenizer_config.json   a byte-level BPE tokenizer trained here
    tests/assets/c4_test/data.json                                 c4-format rows ({"text": ...})

    python make_assets.py DIR    (run from any folder; torchtitan's configs read ./tests/assets under the run's cwd)

The text is generated from a fixed word list with a fixed seed, so every machine makes the same assets.
"""
import json
import os
import random
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

WORDS = ("the model shards its weights over the mesh and every rank holds a part of the tensor while the "
         "collective gathers them back before the layer runs forward and the gradient is reduced over the data "
         "parallel group after the backward pass of each step of training on many devices at once").split()


def text_rows(count: int, seed: int = 0):
    rng = random.Random(seed)
    for _ in range(count):
        yield " ".join(rng.choice(WORDS) for _ in range(rng.randint(200, 400))) + "."


def main(root: str) -> None:
    tok_dir = os.path.join(root, "tests", "assets", "tokenizer")
    data_dir = os.path.join(root, "tests", "assets", "c4_test")
    os.makedirs(tok_dir, exist_ok=True)
    os.makedirs(data_dir, exist_ok=True)
    rows = list(text_rows(400))
    with open(os.path.join(data_dir, "data.json"), "w") as f:
        for row in rows:
            f.write(json.dumps({"text": row, "timestamp": "2019-04-25T12:57:54Z", "url": "https://example.org"}) + "\n")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(rows, trainer)
    tokenizer.save(os.path.join(tok_dir, "tokenizer.json"))
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "add_bos_token": True,
                   "add_eos_token": False, "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast"},
                  f)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
