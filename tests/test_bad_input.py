"Every kind of bad input gets one clear message naming file, line and field, and exit code 2."
import json, subprocess, sys
import pytest
from pope_audit.cli import main

CLI = [sys.executable, '-c', 'from pope_audit.cli import main; main()']


def cli(capsys, *args):
    with pytest.raises(SystemExit) as e: main([str(a) for a in args])
    return e.value.code, capsys.readouterr().err


def pope_file(path, rows):
    path.write_text(''.join((r if isinstance(r, str) else json.dumps(r)) + '\n' for r in rows))
    return path


Q = lambda i, label='yes', **kw: {'question_id': i, 'image': 'a.jpg', 'text': f'Is there a thing{i} in the image?', 'label': label, **kw}


@pytest.mark.parametrize('rows, message', [
    ([Q(1), '{"question_id": 2, "image": "a.jpg"'], "coco_pope_random.json:2: malformed JSON"),
    ([Q(1), {'question_id': 2, 'image': 'a.jpg', 'label': 'no'}], "coco_pope_random.json:2: field 'text': missing field"),
    ([Q(1, 'maybe')], "coco_pope_random.json:1: field 'label': label must be yes or no, got 'maybe'"),
    ([Q(1), Q(1, 'no')], "coco_pope_random.json:2: field 'question_id': duplicate question id 1"),
])
def test_bad_question_file(tmp_path, capsys, rows, message):
    f = pope_file(tmp_path/'coco_pope_random.json', rows)
    ans = pope_file(tmp_path/'answers.jsonl', [{'question_id': 1, 'text': 'Yes'}])
    code, err = cli(capsys, 'score', ans, '--kind', 'llava', '--questions', f)
    assert code == 2 and message in err, err


def test_answers_matching_no_question(tmp_path, capsys):
    f = pope_file(tmp_path/'coco_pope_random.json', [Q(1), Q(2, 'no')])
    ans = pope_file(tmp_path/'answers.jsonl', [{'question_id': 1, 'text': 'Yes'}, {'question_id': 7, 'text': 'No'}])
    code, err = cli(capsys, 'score', ans, '--kind', 'llava', '--questions', f)
    assert code == 2 and "answers.jsonl:2: field 'question_id': answer for question 7, which is not in the question set" in err


def test_split_with_no_questions(tmp_path, capsys):
    f = pope_file(tmp_path/'coco_pope_random.json', [Q(1), Q(2, 'no')])
    ans = pope_file(tmp_path/'answers.jsonl', [{'question_id': 1, 'text': 'Yes'}])
    code, err = cli(capsys, 'score', ans, '--kind', 'llava', '--questions', f, '--splits', 'adversarial')
    assert code == 2 and "field 'split': split 'adversarial' has no questions" in err
    empty = pope_file(tmp_path/'coco_pope_popular.json', [])
    code, err = cli(capsys, 'score', ans, '--kind', 'llava', '--questions', empty)
    assert code == 2 and "coco_pope_popular.json: no questions in split 'popular'" in err


def test_unreadable_tokenizer_and_bad_template(tmp_path, capsys, shared):
    (tmp_path/'broken.gguf').write_bytes(b'GGUF but not really')
    code, err = cli(capsys, 'probe', '--tokenizer', tmp_path/'broken.gguf')
    assert code == 2 and 'broken.gguf' in err and 'cannot load tokenizer' in err
    code, err = cli(capsys, 'probe', '--tokenizer', shared/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf', '--template', 'USER: <image> ASSISTANT:')
    assert code == 2 and "field 'template'" in err and '{question}' in err


def test_console_exit_code(tmp_path):
    "The real process exits with 2 and writes nothing to stdout."
    f = pope_file(tmp_path/'coco_pope_random.json', [Q(1, 'maybe')])
    ans = pope_file(tmp_path/'answers.jsonl', [{'question_id': 1, 'text': 'Yes'}])
    r = subprocess.run(CLI + ['score', str(ans), '--kind', 'llava', '--questions', str(f)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == '' and "field 'label'" in r.stderr


def test_run_lists_missing_images_before_writing(tmp_path, capsys, tiny_dirs):
    f = pope_file(tmp_path/'coco_pope_random.json', [Q(1), {**Q(2, 'no'), 'image': 'b.jpg'}])
    (tmp_path/'img').mkdir()
    code, err = cli(capsys, 'run', '--model', tiny_dirs['llava15'], '--questions', f, '--images', tmp_path/'img', '--out', tmp_path/'out')
    assert code == 2 and '2 image(s) named by the questions are missing: a.jpg, b.jpg' in err
    assert not (tmp_path/'out').exists()
