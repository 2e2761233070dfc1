#!/usr/bin/env python3
"""Writes a llama-architecture GGUF with random weights and a small SentencePiece vocabulary.

The model is for testing a real inference engine (llama.cpp's llama-server) without a download:
its output is gibberish, but tokenization, the chat template, prefill, decode, the slot prompt
cache and every HTTP route are the real server's. Deterministic: the same arguments write the
same file.

The vocabulary is SentencePiece-style ("llama" tokenizer): <unk>, <s>, </s>, the 256 byte
fallbacks, the printable ASCII characters, "▁" + a few hundred common English words (and every
prefix of them, so the SPM merge chain can reach each word), so English prose tokenizes to
roughly one token per word and anything else falls back to characters and bytes.

usage: make_gguf.py OUT.gguf [--layers N] [--embd N] [--ff N] [--heads N] [--ctx N] [--seed N]
"""
import argparse

import numpy as np
import gguf

WORDS = """
the of and to in is was he for it with as his on be at by had are but from or have an they which
one you were her all she there would their we him been has when who will more no if out so said
what up its about into than them can only other new some could time these two may then do first
any my now such like our over man me even most made after also did many before must through back
years where much your way well down should because each just those people how too little state
good very make world still own see men work long get here between both life being under never
day same another know while last might us great old year off come since against go came right
used take three states himself few house use during without again place around however home
small found thought went say part once general high upon school every does got united left
number course war until always away something fact though water less public put think almost
hand enough far took head yet government system better set told nothing night end why called
didn find going look asked later knew point next city business give group toward young let room
president side social given present several order national possible rather second face per
among form important often things looked early white case john become large big need four within
felt along children saw best church ever least power development light thing seemed family
interest want members mind country area others done turned although open problem god service
certain kind different thus began door help means sense whole matter perhaps itself york times
law human line above name example action company hands local show whether five history gave
today either act feet across taken past quite anything seen having death week experience body
word half really field am car words already themselves information tell together college
shall money period held keep sure real probably free seems political cannot behind miss question
air office making brought whose special heard major problems ago became federal moment study
available known result street economic boy position reason change south board individual job
society areas west close turn love community true court force full seem model token tokens
prompt request response stream server proxy latency cache prefill decode document chat user
assistant system message summary answer please write explain short long text data test
""".split()


def vocabulary():
    """Tokens, scores and types in SentencePiece order (specials, bytes, then pieces)."""
    tokens, scores, types = [], [], []

    def add(piece, score, kind):
        tokens.append(piece.encode("utf-8"))
        scores.append(score)
        types.append(kind)

    add("<unk>", 0.0, gguf.TokenType.UNKNOWN)
    add("<s>", 0.0, gguf.TokenType.CONTROL)
    add("</s>", 0.0, gguf.TokenType.CONTROL)
    for byte in range(256):
        add(f"<0x{byte:02X}>", 0.0, gguf.TokenType.BYTE)
    seen = set()
    pieces = ["\u2581"] + [chr(c) for c in range(33, 127)]
    for word in WORDS:
        full = "\u2581" + word
        # Every prefix, so that the SPM merges (which join adjacent pieces that form a token,
        # best score first) can grow the word one character at a time.
        pieces.extend(full[:end] for end in range(2, len(full) + 1))
    for piece in pieces:
        if piece in seen:
            continue
        seen.add(piece)
        # Longer pieces score higher: merges into whole words win over shorter alternatives.
        add(piece, -1000.0 + len(piece), gguf.TokenType.NORMAL)
    return tokens, scores, types


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--embd", type=int, default=512)
    parser.add_argument("--ff", type=int, default=1376)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    tokens, scores, types = vocabulary()
    n_vocab = len(tokens)
    rng = np.random.default_rng(args.seed)

    def weight(*shape):
        # Small random weights keep activations finite through every layer.
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)

    writer = gguf.GGUFWriter(args.out, "llama")
    writer.add_name("tokenmeter-random-llama")
    writer.add_context_length(args.ctx)
    writer.add_embedding_length(args.embd)
    writer.add_block_count(args.layers)
    writer.add_feed_forward_length(args.ff)
    writer.add_head_count(args.heads)
    writer.add_head_count_kv(args.heads)
    writer.add_rope_dimension_count(args.embd // args.heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)

    writer.add_tensor("token_embd.weight", weight(n_vocab, args.embd))
    for layer in range(args.layers):
        prefix = f"blk.{layer}."
        writer.add_tensor(prefix + "attn_norm.weight", np.ones(args.embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(prefix + name + ".weight", weight(args.embd, args.embd))
        writer.add_tensor(prefix + "ffn_norm.weight", np.ones(args.embd, dtype=np.float32))
        writer.add_tensor(prefix + "ffn_gate.weight", weight(args.ff, args.embd))
        writer.add_tensor(prefix + "ffn_up.weight", weight(args.ff, args.embd))
        writer.add_tensor(prefix + "ffn_down.weight", weight(args.embd, args.ff))
    writer.add_tensor("output_norm.weight", np.ones(args.embd, dtype=np.float32))
    writer.add_tensor("output.weight", weight(n_vocab, args.embd))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    params = n_vocab * args.embd * 2 + args.layers * (4 * args.embd**2 + 3 * args.embd * args.ff)
    print(f"{args.out}: {n_vocab} tokens, {params / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main()
