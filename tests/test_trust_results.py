"Trust in results: the probe on merging vocabularies, greedy-exact tie breaking, and refusal of bad inputs."
import json, math
import pytest
from pope_audit.core import InputError
from pope_audit.tokens import (TEMPLATES, FORMS, MERGES, shared_tokenizer, get_template, probe, join_answer, answer_tokens,
                               token_text)

VOCABS = ['llama-spm', 'qwen2']


@pytest.fixture(scope='module')
def toks(shared):
    return {v: shared_tokenizer(v) for v in VOCABS}


def tiny_bpe(merges):
    "A hand-written byte-level BPE whose pre-tokenizer glues one punctuation mark to the next word (Qwen2/LLaMA-3 style)."
    from tokenizers import Tokenizer, Regex, models, pre_tokenizers, decoders
    from transformers import PreTrainedTokenizerFast
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {'<s>': 0, **{c: i + 1 for i, c in enumerate(alphabet)}}
    for a, b in merges: vocab.setdefault(a + b, len(vocab))
    raw = Tokenizer(models.BPE(vocab, merges))
    raw.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+|\s+"), behavior='isolated'),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    raw.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=raw, bos_token='<s>')


def check_probe(tok, pr):
    "What must hold for any vocabulary and template: no crash, a consistent table, and a derived set the decoder can emit."
    a = pr.answers
    prompt = pr.template.render(pr.question)
    for r in a.itertuples():
        ids, replaced = join_answer(tok, prompt, eval(r.joining))
        assert tuple(ids) == r.ids
        assert (r.verdict == MERGES) == bool(replaced) == bool(r.merged)
        assert r.single == (not replaced and len(ids) == 1)
        if r.verdict == MERGES:
            assert not r.single
            # the merge really happened: the prompt's own last ids are not a prefix of the joined encoding
            assert tok(prompt + eval(r.joining)).input_ids[:len(tok(prompt).input_ids)] != tok(prompt).input_ids
    for label, ids in pr.derived.items():
        for i in ids:
            assert token_text(tok, i).strip() in FORMS[label]
            rows = a[a.used & a.single & (a.label == label)]
            assert (i,) in rows.ids.tolist()
    assert pr.derived == {k: sorted({r.ids[0] for r in a.itertuples() if r.used and r.single and r.label == k}) for k in FORMS}
    d = json.loads(json.dumps(pr.to_dict()))
    assert [x['verdict'] for x in d['answers']] == a.verdict.tolist()
    assert [x['merged'] for x in d['answers']] == a.merged.tolist()


@pytest.mark.parametrize('template', list(TEMPLATES))
@pytest.mark.parametrize('vocab', VOCABS)
def test_probe_every_preset(toks, vocab, template):
    tok = toks[vocab]
    pr = probe(tok, template)
    check_probe(tok, pr)
    assert pr.derived['yes'] and pr.derived['no'], pr.answers


def test_probe_qwen2_llava15(toks):
    pr = probe(toks['qwen2'], 'llava15')
    assert pr.derived == {'yes': [7414, 9834], 'no': [902, 2308]}
    m = pr.answers[pr.answers.verdict == MERGES]
    assert m.joining.tolist() == ["'no'"] and m.ids.tolist() == [(66479,)] and m.merged.tolist() == [':']
    with pytest.raises(ValueError, match='merges with the end of the prompt'): answer_tokens(toks['qwen2'], pr.template.render('Q?'), 'no')


def test_probe_cli_qwen2(shared, capsys):
    from pope_audit.cli import main
    main(['probe', '--tokenizer', shared/'tokenizers/qwen2', '--gguf-file', 'ggml-vocab-qwen2.gguf', '--json'])
    d = json.loads(capsys.readouterr().out)['probe']
    assert d['derived'] == {'yes': [7414, 9834], 'no': [902, 2308]}
    assert [(x['joining'], x['verdict'], x['merged'], x['tokens']) for x in d['answers'] if x['verdict'] == MERGES] == \
        [("'no'", MERGES, ':', ':no')]


def test_probe_mplug_owl2(toks):
    assert TEMPLATES['mplug-owl2'].text == 'USER: <|image|>{question}\nAnswer the question using a single word or phrase. ASSISTANT:'
    assert TEMPLATES['mplug-owl2'].sep == ' '
    pr = probe(toks['llama-spm'], 'mplug-owl2')
    a = pr.answers.set_index('joining')
    assert (a.loc["' Yes'", 'ids'], a.loc["' No'", 'ids']) == ((3869,), (1939,))
    assert pr.derived == {'yes': [3869, 4874], 'no': [694, 1939]}


MERGES_TOY = [(':', 'n'), (':n', 'o'), (':', 'Y'), (':Y', 'e'), (':Ye', 's'),   # first: BPE applies merges by rank
              ('Ġ', 'Y'), ('ĠY', 'e'), ('ĠYe', 's'), ('Ġ', 'N'), ('ĠN', 'o'), ('Ġ', 'y'), ('Ġy', 'e'), ('Ġye', 's'),
              ('Ġ', 'n'), ('Ġn', 'o'), ('y', 'e'), ('ye', 's'), ('N', 'o'), ('Y', 'e'), ('Ye', 's'), ('n', 'o')]


@pytest.mark.parametrize('template', ['Q: {question} A:', 'USER: {question}\nASSISTANT:', '{question}\n', '{question}'])
def test_probe_hand_written_bpe(template):
    tok = tiny_bpe(MERGES_TOY)
    pr = probe(tok, template, 'is there a cat?')
    check_probe(tok, pr)
    v = pr.answers.set_index('joining').verdict
    ends_colon = get_template(template).text.endswith(':')
    if ends_colon:   # spaced forms are single tokens; 'no' and 'Yes' glue onto the colon
        assert pr.derived == {'yes': tok.convert_tokens_to_ids(['ĠYes', 'Ġyes']), 'no': tok.convert_tokens_to_ids(['ĠNo', 'Ġno'])}
        assert (v["'no'"], v["'Yes'"], v["'yes'"], v["'No'"]) == (MERGES, MERGES, 'single token', 'single token')
    elif template.endswith('\n'):   # joins with nothing after whitespace: the bare forms
        assert pr.derived == {'yes': sorted(tok.convert_tokens_to_ids(['Yes', 'yes'])), 'no': sorted(tok.convert_tokens_to_ids(['No', 'no']))}
    else:            # '...cat?' + 'no' -> '?no' is one pre-token but has no merge: still separate tokens
        assert MERGES not in v.tolist()


def test_probe_everything_merges():
    "A vocabulary where every unspaced form merges and the template joins without a space: an empty set, no crash."
    tok = tiny_bpe([(':', 'n'), (':n', 'o'), (':', 'N'), (':N', 'o'), (':', 'y'), (':y', 'e'), (':ye', 's'), (':', 'Y'), (':Y', 'e'), (':Ye', 's')])
    from pope_audit.tokens import Template
    pr = probe(tok, Template('glued', 'Q: {question} A:', ''))
    check_probe(tok, pr)
    assert pr.derived == {'yes': [], 'no': []}
    assert set(pr.answers[pr.answers.used].verdict) == {MERGES}


# --- bad inputs in templates ---

def test_template_two_slots():
    with pytest.raises(InputError, match='exactly one'): get_template('{question} and {question}')


def test_template_escapes_keep_non_ascii():
    assert get_template('Réponds: {question}\\nASSISTANT:').text == 'Réponds: {question}\nASSISTANT:'
    assert get_template('问 {question}\\t答:').text == '问 {question}\t答:'
    assert get_template('{question} C:\\\\nope').text == '{question} C:\\nope'
