"Trust in results: the probe on merging vocabularies, greedy-exact tie breaking, and refusal of bad inputs."
import json, math
import pytest
from pope_audit.foundation.core import InputError
from pope_audit.foundation.tokens import (TEMPLATES, FORMS, MERGES, shared_tokenizer, get_template, probe, join_answer, answer_tokens,
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
    from pope_audit.interface.cli import main
    main(['probe', '--tokenizer', shared/'tokenizers/qwen2', '--gguf-file', 'ggml-vocab-qwen2.gguf', '--template', 'llava15', '--json'])
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
    from pope_audit.foundation.tokens import Template
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


# --- ties decided as greedy decoding decides them ---

from pope_audit.foundation.readouts import (Record, READOUTS, TIE_RULES, max_readout, exact_tie, register_readout, margin)
from pope_audit.foundation.tokens import LLAVA_TWO, LLAVA_EIGHT


def argmax_id(logits, n=32000):
    import torch
    x = torch.full((n,), -1e4, dtype=torch.float16)
    x[list(logits)] = torch.tensor(list(logits.values()), dtype=torch.float16)
    return int(x.argmax())


def rec_with(logits, derived, greedy_id=None):
    return Record('adversarial', 1, 'x.jpg', 'Is there a dog?', 'no', logits=logits, derived=derived, greedy_id=greedy_id,
                  surface={'yes': [3582, 3869, 4874, 8241], 'no': [694, 1217, 1939, 3782]})


def test_max_readouts_break_ties_like_argmax():
    "Random fp16-like logits on a coarse grid (many exact ties), random id sets: every max readout equals argmax over its ids."
    import random
    rng = random.Random(0)
    n_ties = {t: 0 for t in TIE_RULES}
    for _ in range(1000):
        pool = rng.sample(range(1, 32000), 8)
        ids = {'yes': pool[:rng.randint(1, 4)], 'no': pool[4:4 + rng.randint(1, 4)]}
        logits = {i: float(rng.randint(0, 3)) for i in pool}
        r = rec_with(logits, ids, argmax_id(logits))
        best = argmax_id({i: logits[i] for i in ids['yes'] + ids['no']})
        want = 'yes' if best in ids['yes'] else 'no'
        assert READOUTS['derived'](r) == max_readout(r, ids) == want
        assert READOUTS['derived'](r, tie='ge') == ('yes' if exact_tie(r) else want)
        if r.greedy_id in ids['yes'] + ids['no']: assert READOUTS['derived'](r) == READOUTS['greedy'](r)
        n_ties['decoder'] += exact_tie(r) and want == 'no'
        n_ties['ge'] += exact_tie(r) and want == 'yes'
    assert n_ties["decoder"] > 30 and n_ties["ge"] > 30, n_ties   # ties going both ways were exercised


def test_fixed_sets_tie_by_lowest_id():
    eight = {i: 0.0 for ids in LLAVA_EIGHT.values() for i in ids}
    r = rec_with({**eight, 3582: 5.0, 3782: 5.0}, None)            # yes 3582 < No 3782
    assert (READOUTS['eight_token'](r), READOUTS['eight_token'](r, tie='ge')) == ('yes', 'yes')
    r = rec_with({**eight, 8241: 5.0, 3782: 5.0}, None)            # Yes 8241 > No 3782
    assert (READOUTS['eight_token'](r), READOUTS['eight_token'](r, tie='ge')) == ('no', 'yes')
    r = rec_with({**eight, 3582: 5.0, 1217: 5.0}, None)            # yes 3582 > no 1217
    assert (READOUTS['two_token'](r), READOUTS['two_token'](r, tie='ge')) == ('no', 'yes')
    assert exact_tie(r, LLAVA_TWO) and not exact_tie(r, {'yes': [3582], 'no': [3782]})


def test_tie_below_a_higher_token():
    ll = {'yes': [3869, 4874], 'no': [694, 1939]}
    lg = {3869: 8.0, 4874: 1.0, 694: 1.0, 1939: 8.0, 13: 10.0}
    r = rec_with(lg, ll, argmax_id(lg))
    assert r.greedy_id == 13 and READOUTS['greedy'](r) == 'unknown'
    assert (READOUTS['derived'](r), READOUTS['derived'](r, tie='ge'), exact_tie(r)) == ('no', 'yes', True)


def test_partly_missing_logits_are_unknown():
    ll = {'yes': [3869, 4874], 'no': [694, 1939]}
    r = rec_with({3869: 9.0, 694: 1.0, 1939: 2.0}, ll)
    assert (READOUTS['derived'](r), margin(r), exact_tie(r)) == ('unknown', None, False)


def test_tie_rule_checked_and_registry_refuses_duplicates():
    r = rec_with({3869: 1.0, 4874: 0.0, 694: 0.0, 1939: 0.0}, {'yes': [3869, 4874], 'no': [694, 1939]})
    with pytest.raises(InputError, match='tie rule'): READOUTS['derived'](r, tie='no')
    with pytest.raises(ValueError, match='already registered'): register_readout('greedy', 'greedy', 'again')(lambda rec: 'yes')
    assert READOUTS['greedy'].description.startswith('the greedy first token')


def test_apply_readouts_removed():
    import pope_audit.foundation.readouts as ro
    assert not hasattr(ro, 'apply_readouts')


# --- bad records ---

GOOD = dict(split='adversarial', question_id=1, image='x.jpg', question='Is there a dog?', label='no')


@pytest.mark.parametrize('logits', ['{"3869": NaN}', '{"3869": Infinity}', '{"3869": -Infinity}', '{"3869": "NaN"}',
                                    '{"3869": "1.5"}', '{"3869": null}', '{"3869": true}', '{"3869": [1]}', '{"x": 1.0}',
                                    '[1.0, 2.0]', '"logits"', '3.5'])
def test_record_refuses_bad_logits(logits):
    d = {**GOOD, 'logits': json.loads(logits)}
    with pytest.raises(InputError, match='logits') as e: Record.from_dict(d, 'records.jsonl', 4)
    assert "records.jsonl:4: field 'logits'" in str(e.value)


def test_record_accepts_good_logits_and_refuses_unknown_schema():
    assert Record.from_dict({**GOOD, 'logits': {'3869': 1, '1939': -2.5e3}}).logits == {3869: 1.0, 1939: -2500.0}
    with pytest.raises(InputError, match='unknown record schema'): Record.from_dict({**GOOD, 'schema': 'pope-audit/record/0'})
