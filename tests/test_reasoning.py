"Models that think first: reasoning stripped before text readouts, the answer position after the block in runs, bad thinking settings."
import json
from types import SimpleNamespace
import pytest
import torch
from pope_audit.interface.cli import main
from pope_audit.foundation.reasoning import strip_reasoning, answer_position, Thinking, MARKERS, think_block
from pope_audit.foundation.readouts import Record, READOUTS

YES, NO, THINK, END, NL, NN, IM_END = 9454, 2753, 151667, 151668, 198, 271, 151645   # Qwen3's ids ('Yes', 'No', <think>, </think>, '\n', '\n\n', <|im_end|>)


@pytest.fixture(scope='module')
def qwen3(shared):
    from pope_audit.foundation.tokens import shared_tokenizer
    return shared_tokenizer('qwen3')


def scripted_family(tok, script, answer_logit):
    "A family whose model `generate`s `script` greedily; the step `answer_logit` names gets yes above no (elsewhere the scripted token leads)."
    V = len(tok)
    def generate(input_ids, max_new_tokens, **kw):
        steps = script[:max_new_tokens]
        logits = []
        for i, t in enumerate(steps):
            lg = torch.zeros(1, V); lg[0, t] = 10.0
            if i == answer_logit: lg[0, NO] = 9.0
            logits.append(lg)
        return SimpleNamespace(sequences=torch.tensor([input_ids[0].tolist() + steps]), logits=tuple(logits))
    return SimpleNamespace(think=dict(end_id=END, start_id=THINK), tokenizer=tok, candidate_ids=lambda: [YES, NO, THINK], eos_ids={IM_END},
                           full_inputs=lambda image, q: dict(input_ids=torch.tensor([[1, 2, 3]])), model=SimpleNamespace(generate=generate))


def rec(r, **kw):
    return Record('random', 1, 'a.jpg', 'Is there a dog?', 'yes', logits=r['logits'], greedy_id=r['greedy_id'], text=r['text'],
                  derived={'yes': [YES], 'no': [NO]}, surface={'yes': [YES], 'no': [NO]}, thinking=r['thinking'], **kw)


def test_answer_read_after_the_block(qwen3):
    from pope_audit.running.inference import think_answers
    body = qwen3.encode('The picture shows a dog.', add_special_tokens=False)
    script = [THINK, NL, *body, NL, END, NN, YES, IM_END]
    at = len(body) + 5
    (r,) = think_answers(scripted_family(qwen3, script, at), None, ['q'], max_think_tokens=64, max_new_tokens=4)
    assert r['thinking']['answer_step'] == at and script[at] == YES
    assert r['thinking']['think_tokens'] == len(body) + 4 and r['thinking']['think_cut'] is False
    assert r['greedy_id'] == YES and r['logits'][YES] == 10.0 and r['logits'][NO] == 9.0
    assert r['thinking']['first_step']['greedy_id'] == THINK          # what a first-step readout would have read
    assert r['text'].startswith('<think>') and r['text'].endswith('Yes')
    R = rec(r)
    assert Record.from_dict(json.loads(json.dumps(R.to_dict()))).thinking['first_step']['logits'][THINK] == 10.0   # ids, not strings, read back
    assert READOUTS['derived'](R) == 'yes' and READOUTS['greedy'](R) == 'yes'
    assert READOUTS['lmms_exact'](R) == 'yes' and READOUTS['vlmeval_yorn'](R) == 'yes'    # the text rules read the answer, not the reasoning
    first = Record(**{**R.__dict__, 'logits': r['thinking']['first_step']['logits'], 'greedy_id': THINK, 'margin': None})
    assert READOUTS['greedy'](first) == 'unknown' and READOUTS['derived'](first) == 'no'  # at the first step the marker leads; yes and no both 0


def test_block_cut_by_the_limit(qwen3):
    from pope_audit.running.inference import think_answers
    script = [THINK] + [NL] * 40 + [END, NN, YES, IM_END]
    (r,) = think_answers(scripted_family(qwen3, script, 43), None, ['q'], max_think_tokens=16, max_new_tokens=4)
    assert r['thinking']['think_cut'] is True and r['thinking']['answer_step'] is None and r['logits'] == {}
    R = rec(r)
    assert READOUTS['derived'](R) == 'unknown' and READOUTS['lmms_exact'](R) == 'unknown' and READOUTS['pope_parse'](R) == 'unknown'
    back = Record.from_dict(json.loads(json.dumps(R.to_dict())))
    assert back.thinking['think_cut'] is True and back.logits == {}


def test_strip_reasoning_cases():
    assert strip_reasoning('<think>\nNo dog here.\n</think>\n\nNo') == ('No', 'No dog here.', False)
    assert strip_reasoning('no block: Yes') == ('no block: Yes', '', False)
    assert strip_reasoning('<think>a</think>Yes<think>b') == ('', 'b', True)
    assert answer_position([THINK, 5, END, NN, NL, YES], END, lambda i: i in (NN, NL)) == 5
    assert think_block(MARKERS['kimi']) == '◁think▷\nThe image shows a dog on a sofa.\n◁/think▷\n\n'


def cli(capsys, *args):
    with pytest.raises(SystemExit) as e: main([str(a) for a in args])
    return e.value.code, capsys.readouterr()


@pytest.mark.parametrize('n', [0, -3])
def test_max_think_tokens_refused(tmp_path, capsys, n):
    code, out = cli(capsys, 'run', '--model', tmp_path/'m', '--questions', tmp_path/'q.json', '--out', tmp_path/'out', '--max-think-tokens', n)
    assert code == 2 and out.err.count('\n') == 1 and "'max-think-tokens'" in out.err and 'at least 1' in out.err
    assert not (tmp_path/'out').exists()


def test_thinking_on_without_a_switch(tmp_path, capsys, tiny_dirs, shared):
    f = tmp_path/'coco_pope_random.json'
    f.write_text(json.dumps({'question_id': 1, 'image': 'a.jpg', 'text': 'Is there a dog in the image?', 'label': 'yes'}) + '\n')
    from pope_audit.models.tiny import stand_in_images
    stand_in_images(['a.jpg'], tmp_path/'img')
    code, out = cli(capsys, 'run', '--model', tiny_dirs['llava15'], '--questions', f, '--images', tmp_path/'img', '--out', tmp_path/'out', '--thinking', 'on')
    assert code == 2 and out.err.count('\n') == 1 and 'no thinking switch' in out.err, out.err
    assert not (tmp_path/'out').exists()


def test_lmms_log_of_a_thinking_model(tmp_path, capsys):
    "The raw response is read where it holds the block; the answer after it is scored, a cut one counts as unknown and is counted."
    doc = lambda i, a: {'question_id': str(i), 'question': f'Is there a thing{i} in the image?', 'answer': a, 'category': 'random', 'image_source': f'{i}.jpg'}
    raw = ['<think>\nI see thing1 on the left.\n</think>\n\nYes', '<think>\nNothing like thing2. So no.\n</think>\n\nNo',
           '<think>\nThe picture shows thing3 and', 'Yes']
    filtered = ['I see thing1 on the left.', 'Nothing like thing2. So no.', 'The picture shows thing3 and', 'Yes']   # a filter that kept the reasoning
    f = tmp_path/'pope_random.jsonl'
    f.write_text(''.join(json.dumps({'doc_id': i, 'doc': doc(i + 1, a), 'resps': [[r]], 'filtered_resps': [t]}) + '\n'
                         for i, (a, r, t) in enumerate(zip(['yes', 'no', 'yes', 'yes'], raw, filtered))))
    main(['score', str(f), '--kind', 'lmms-eval', '--readouts', 'lmms_exact', '--boot', '0', '--json'])
    out = json.loads(capsys.readouterr().out)
    s = next(r for r in out['scores'] if r['readout'] == 'lmms_exact')
    assert s['n'] == 4 and s['unknown_rate'] == 0.25 and s['accuracy'] == 0.75, s
    assert any('3 answer(s) hold a reasoning block' in n and '1 of them were cut off' in n for n in out['notes'])
