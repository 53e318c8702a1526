"""GRU seq2seq with additive attention and teacher forcing (translation)."""
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self, vocab, emb, enc_hid, dec_hid, dropout):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.rnn = nn.GRU(emb, enc_hid, bidirectional=True)
        self.fc = nn.Linear(enc_hid * 2, dec_hid)
        self.drop = nn.Dropout(dropout)

    def forward(self, src):
        out, hidden = self.rnn(self.drop(self.embed(src)))
        hidden = torch.tanh(self.fc(torch.cat((hidden[-2], hidden[-1]), dim=1)))
        return out, hidden


class Attention(nn.Module):
    def __init__(self, enc_hid, dec_hid):
        super().__init__()
        self.attn = nn.Linear(enc_hid * 2 + dec_hid, dec_hid)
        self.v = nn.Linear(dec_hid, 1, bias=False)

    def forward(self, hidden, enc_out):
        src_len = enc_out.shape[0]
        hidden = hidden.unsqueeze(1).repeat(1, src_len, 1)
        enc_out = enc_out.permute(1, 0, 2)
        energy = torch.tanh(self.attn(torch.cat((hidden, enc_out), dim=2)))
        return F.softmax(self.v(energy).squeeze(2), dim=1)


class Decoder(nn.Module):
    def __init__(self, vocab, emb, enc_hid, dec_hid, dropout):
        super().__init__()
        self.output_dim = vocab
        self.attention = Attention(enc_hid, dec_hid)
        self.embed = nn.Embedding(vocab, emb)
        self.rnn = nn.GRU(enc_hid * 2 + emb, dec_hid)
        self.fc = nn.Linear(enc_hid * 2 + dec_hid + emb, vocab)
        self.drop = nn.Dropout(dropout)

    def forward(self, inp, hidden, enc_out):
        emb = self.drop(self.embed(inp.unsqueeze(0)))
        a = self.attention(hidden, enc_out)
        self.attn_weights = a
        weighted = torch.bmm(a.unsqueeze(1), enc_out.permute(1, 0, 2)).permute(1, 0, 2)
        output, hidden = self.rnn(torch.cat((emb, weighted), dim=2), hidden.unsqueeze(0))
        pred = self.fc(torch.cat((output.squeeze(0), weighted.squeeze(0), emb.squeeze(0)), dim=1))
        return pred, hidden.squeeze(0)


class Seq2Seq(nn.Module):
    def __init__(self, encoder, decoder, device):
        super().__init__()
        self.encoder, self.decoder, self.device = encoder, decoder, device

    def forward(self, src, trg, teacher_forcing_ratio=0.5):
        trg_len, bs = trg.shape
        outputs = torch.zeros(trg_len, bs, self.decoder.output_dim, device=self.device)
        enc_out, hidden = self.encoder(src)
        inp = trg[0]
        for t in range(1, trg_len):
            out, hidden = self.decoder(inp, hidden, enc_out)
            outputs[t] = out
            teacher = random.random() < teacher_forcing_ratio
            top1 = out.argmax(1)
            inp = trg[t] if teacher else top1
        return outputs


def train(model, iterator, optimizer, criterion, clip, attn_snapshots):
    model.train()
    epoch_loss = 0
    for i, (src, trg) in enumerate(iterator):
        optimizer.zero_grad()
        output = model(src, trg)
        output_dim = output.shape[-1]
        loss = criterion(output[1:].view(-1, output_dim), trg[1:].view(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        epoch_loss += loss.item()
        if i % 100 == 0:
            attn_snapshots.append(model.decoder.attn_weights)
    return epoch_loss / len(iterator)


def evaluate(model, iterator, criterion):
    model.eval()
    epoch_loss = 0
    hyps = []
    for src, trg in iterator:
        output = model(src, trg, 0)
        output_dim = output.shape[-1]
        loss = criterion(output[1:].view(-1, output_dim), trg[1:].view(-1))
        epoch_loss += loss
        hyps.append(output.argmax(-1))
    return epoch_loss / len(iterator), hyps
