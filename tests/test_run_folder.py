"A run folder accepts only records it can vouch for, has one writer at a time, and every bad run input gets exit 2."
import json, os, signal, subprocess, sys, time
import pytest
from pope_audit.interface.cli import main
from pope_audit.benchmarks.scoring import read_records
from pope_audit.models.tiny import stand_in_images

CLI = [sys.executable, '-c', 'from pope_audit.interface.cli import main; main()']


def cli(capsys, *args):
    with pytest.raises(SystemExit) as e: main([str(a) for a in args])
    return e.value.code, capsys.readouterr().err


@pytest.fixture
def setup(shared, pope, tiny_dirs, tmp_path):
    images = stand_in_images(pope.groupby('split').head(6).image.unique(), tmp_path/'img')
    def args(out, *extra, model=tiny_dirs['llava15'], images=images):
        return ['run', '--model', model, '--questions', shared/'data/pope/coco', '--images', images, '--limit', '6',
                '--batch-size', '4', '--max-new-tokens', '2', '--out', out, *extra]
    return args, images


def test_second_writer_is_refused_and_a_dead_holder_frees_the_folder(setup, tmp_path, capsys):
    args, _ = setup
    out = tmp_path/'run'
    holder = subprocess.Popen([sys.executable, '-c', f'from pope_audit.running.runconfig import RunFolder; import time; RunFolder({str(out)!r}).lock(); print("held", flush=True); time.sleep(600)'],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == 'held'
    code, err = cli(capsys, *args(out))
    assert code == 2 and f'this run folder is in use by pid {holder.pid}' in err
    assert not (out/'records.jsonl').exists()
    os.kill(holder.pid, signal.SIGKILL); holder.wait()          # kill -9: the kernel releases the lock; nothing is waited on
    main([str(a) for a in args(out)])
    assert len(read_records(out)) == 18


def test_records_without_manifest_are_not_adopted(setup, tmp_path, capsys):
    args, _ = setup
    main([str(a) for a in args(tmp_path/'a')])
    (tmp_path/'b').mkdir()
    (tmp_path/'b'/'records.jsonl').write_bytes((tmp_path/'a'/'records.jsonl').read_bytes())
    code, err = cli(capsys, *args(tmp_path/'b'))
    assert code == 2 and 'holds records but no manifest.json' in err


def test_other_images_are_another_run(setup, tmp_path, capsys, pope):
    args, images = setup
    main([str(a) for a in args(tmp_path/'run')])
    other = stand_in_images(pope.groupby('split').head(6).image.unique(), tmp_path/'other', size=(320, 240))
    before = (tmp_path/'run'/'records.jsonl').read_bytes()
    code, err = cli(capsys, *args(tmp_path/'run', images=other))
    assert code == 2 and 'images.sha256:' in err and 'images that differ:' in err
    assert (tmp_path/'run'/'records.jsonl').read_bytes() == before


def test_environment_changes_are_reported_not_refused(setup, tmp_path, capsys):
    args, _ = setup
    out = tmp_path/'run'
    main([str(a) for a in args(out)])
    m = json.loads((out/'manifest.json').read_text())
    m['environment']['torch'] = '0.0-older'
    (out/'manifest.json').write_text(json.dumps(m))
    main([str(a) for a in args(out)])
    assert 'note: resuming in another environment: torch: "0.0-older" →' in capsys.readouterr().err


@pytest.mark.parametrize('extra, message', [
    (['--limit', '0'], "field 'limit': must be a whole number of at least 1"),
    (['--limit', '-1'], "field 'limit': must be a whole number of at least 1"),
    (['--topk', '40000'], "field 'topk': top-k 40000 exceeds the vocabulary"),
    (['--device', 'nosuch'], "field 'device': unknown device 'nosuch'"),
    (['--attn-implementation', 'nosuch'], "field 'attn_implementation': attention implementation 'nosuch' is not one this model supports"),
])
def test_bad_options_are_refused_before_the_manifest(setup, tmp_path, capsys, extra, message):
    args, _ = setup
    a = args(tmp_path/'run')
    for k, v in zip(extra[::2], extra[1::2]):
        if k in a: a[a.index(k) + 1] = v
        else: a += [k, v]
    code, err = cli(capsys, *a)
    assert code == 2 and message in err, err
    assert not (tmp_path/'run'/'manifest.json').exists()


def test_bad_output_folders_and_manifests(setup, tmp_path, capsys):
    args, _ = setup
    (tmp_path/'file').write_text('x')
    assert cli(capsys, *args(tmp_path/'file'))[1].endswith("field 'out': the output folder is a file\n")
    assert 'lies below a file' in cli(capsys, *args(tmp_path/'file'/'run'))[1]
    (tmp_path/'m').mkdir(); (tmp_path/'m'/'manifest.json').write_text('{"identity": [')
    code, err = cli(capsys, *args(tmp_path/'m'))
    assert code == 2 and 'manifest.json' in err and 'manifest is not valid JSON' in err
    (tmp_path/'m'/'manifest.json').write_text('"just a string"')
    assert 'not a run manifest' in cli(capsys, *args(tmp_path/'m'))[1]
    (tmp_path/'s').mkdir(); (tmp_path/'s'/'manifest.json').symlink_to(tmp_path/'file')
    assert 'refusing to write through a symbolic link' in cli(capsys, *args(tmp_path/'s'))[1]


def test_image_names_stay_inside_the_image_folder(tiny_dirs, tmp_path, capsys):
    q = tmp_path/'coco_pope_random.json'
    q.write_text(json.dumps({'question_id': 1, 'image': '../secret.jpg', 'text': 'Is there a cat in the image?', 'label': 'yes'}) + '\n')
    (tmp_path/'img').mkdir()
    code, err = cli(capsys, 'run', '--model', tiny_dirs['llava15'], '--questions', q, '--images', tmp_path/'img', '--out', tmp_path/'run')
    assert code == 2 and "image name '../secret.jpg' must be a relative path inside the image folder" in err
    assert not (tmp_path/'run').exists()


def test_model_config_file_and_demo_without_images(tiny_dirs, tmp_path, capsys, setup):
    args, _ = setup
    code, err = cli(capsys, *args(tmp_path/'run', model=tiny_dirs['llava15']/'config.json'))
    assert code == 2 and 'give the model folder, not a file inside it' in err
    code, err = cli(capsys, 'demo', '--out', tmp_path/'demo', '--images', '0')
    assert code == 2 and 'the demo needs at least one image' in err


@pytest.mark.parametrize('config, extra, message', [
    ('splits: random\n', [], "field 'splits': must be a list of split names, got 'random'"),
    ('corrections: 7\n', [], "field 'corrections': must be a list of corrections, got 7"),
    ('attention: 3\n', [], "field 'attention': must be true or false, got 3"),
    ('bogus_key: 1\n', [], "field 'bogus_key': unknown run setting(s): bogus_key"),
    ('{}\n', ['--model-args', 'foo=bar'], "unexpected keyword argument 'foo'"),
    ('{}\n', ['--model-args', '=1'], "field 'model_args': family options and model arguments are key=value settings"),
    ('{}\n', ['--dtype', 'float32', '--model-args', 'dtype=float16'], "field 'model_args': dtype=float16 in the model arguments contradicts the run dtype float32"),
    ('{}\n', ['--processes', '0'], "field 'processes': must be a whole number of at least 1, got 0"),
])
def test_bad_config_values_and_model_args_exit_2(setup, tmp_path, capsys, config, extra, message):
    args, _ = setup
    (tmp_path/'c.yaml').write_text(config)
    code, err = cli(capsys, *args(tmp_path/'run'), '--config', tmp_path/'c.yaml', *extra)
    assert code == 2 and message in err, err
    assert not (tmp_path/'run'/'manifest.json').exists()


def test_an_images_folder_that_is_a_file_exits_2(setup, tmp_path, capsys):
    args, images = setup
    code, err = cli(capsys, *args(tmp_path/'run', images=next(images.iterdir())))
    assert code == 2 and "field 'images': the image folder is a file" in err, err
    code, err = cli(capsys, *args(tmp_path/'run', images=tmp_path/'nowhere'))
    assert code == 2 and "field 'images': the image folder does not exist" in err, err
    code, err = cli(capsys, *args(tmp_path/'run', images=tmp_path/'nowhere'), '--processes', '2')    # refused before any worker starts
    assert code == 2 and "field 'images': the image folder does not exist" in err, err


def test_records_of_another_run_under_the_manifest_are_refused_on_resume(setup, tmp_path, capsys):
    args, _ = setup
    out = tmp_path/'run'
    main([str(a) for a in args(out)])
    lines = (out/'records.jsonl').read_text().splitlines(keepends=True)
    rid = json.loads((out/'manifest.json').read_text())['run_id']
    assert len(rid) == 12 and all(json.loads(l)['run_id'] == rid for l in lines)
    lines[2] = lines[2].replace(rid, 'ffffffffffff')
    (out/'records.jsonl').write_text(''.join(lines))
    code, err = cli(capsys, *args(out))
    assert code == 2 and "records.jsonl:3: field 'run_id': record written by another run (run_id ffffffffffff)" in err, err
    assert (out/'records.jsonl').read_text() == ''.join(lines)
