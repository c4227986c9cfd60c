"""Generate a tiny Llama-architecture model with random weights and a real BPE tokenizer.

Staging and the tests serve it with the real vLLM engine: no hub download is possible (or wanted)
there, and a 300 KB model loads in seconds on a CPU. The output is deterministic for the same
arguments. Runs in the node's vLLM venv (torch, transformers, tokenizers); standalone on purpose,
so the role can copy this one file to a node.

    python tiny_model.py --out /srv/models/tiny-llama [--layers 2 --hidden 128 --heads 2 --kv-heads 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "vLLM serves large language models with paged attention and continuous batching.",
    "A deploy is proven by a completion, not by a health check.",
    "GPUs, drivers, CUDA and torch must agree before the engine starts.",
    "Hello world! How are you today? I am fine, thank you.",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000",
] * 20

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def build(out: str, *, layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int | None,
          intermediate: int, max_position: int, vocab: int, seed: int) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE

    extra = {"head_dim": head_dim} if head_dim else {}
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=hidden, intermediate_size=intermediate,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=max_position, bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, tie_word_embeddings=False,
        **extra,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)

    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tiny-model-", dir=parent)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        fast.save_pretrained(tmp)
        # safetensors writes 0600; the model is served by an unprivileged user.
        for entry in os.listdir(tmp):
            os.chmod(os.path.join(tmp, entry), 0o644)
        os.chmod(tmp, 0o755)
        if os.path.exists(out):
            shutil.rmtree(out)
        os.rename(tmp, out)  # atomic: a half-written model never looks complete
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--kv-heads", type=int, default=1)
    p.add_argument("--head-dim", type=int, default=None)
    p.add_argument("--intermediate", type=int, default=256)
    p.add_argument("--max-position", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    build(a.out, layers=a.layers, hidden=a.hidden, heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim,
          intermediate=a.intermediate, max_position=a.max_position, vocab=a.vocab, seed=a.seed)
    print(f"tiny model written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
