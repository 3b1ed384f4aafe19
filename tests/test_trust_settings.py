"""No run setting is silently dropped or contradicted: each one the run could not honour is refused before the run starts
(one line, exit 2), and `report` works on every valid run folder."""
import json, os, shutil, subprocess, sys, tempfile
from pathlib import Path
import pytest
from pope_audit.interface.cli import main
from pope_audit.running.runconfig import usable_cores

CLI = [sys.executable, '-c', 'from pope_audit.interface.cli import main; main()']


def cli(capsys, *args):
    with pytest.raises(SystemExit) as e: main([str(a) for a in args])
    err = capsys.readouterr().err
    assert err.count('\n') == 1, err            # one line, no traceback
    return e.value.code, err


@pytest.fixture
def setup(shared, pope, tiny_dirs, tmp_path):
    "A tiny LLaVA run on six questions per split of the real POPE files (stand-in images)."
    from pope_audit.models.tiny import stand_in_images
    images = stand_in_images(pope.groupby('split').head(2).image.unique(), tmp_path/'img')
    def args(out, *extra, model=tiny_dirs['llava15']):
        return ['run', '--model', model, '--questions', shared/'data/pope/coco', '--images', images, '--limit', '2',
                '--batch-size', '2', '--max-new-tokens', '1', '--out', out, *extra]
    return args


def refused(capsys, args, out, message):
    code, err = cli(capsys, *args)
    assert code == 2 and message in err, err
    assert not Path(out).exists()               # refused before the run started: no folder, no manifest
    return err


# --- configs ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('name, text, message', [
    ('run.yaml', 'limit: 2\nbatch-size: 2\nlimit: 3\n', "run.yaml:3: field 'limit': 'limit' is given twice in one mapping (lines 1 and 3)"),
    ('run.yaml', 'model_args:\n  low_cpu_mem_usage: true\n  low_cpu_mem_usage: false\n', "'low_cpu_mem_usage' is given twice in one mapping (lines 2 and 3)"),
    ('run.toml', 'limit = 2\nlimit = 3\n', 'run.toml: cannot read config (TOMLDecodeError: Cannot overwrite a value'),
    ('run.yaml', 'max-new-tokens: 4\nmax_new_tokens: 8\n', "run.yaml: field 'max_new_tokens': max-new-tokens and max_new_tokens are one setting, given twice"),
    ('run.toml', 'max_new_tokens = 4\nmax-new-tokens = 8\n', "field 'max_new_tokens': max-new-tokens and max_new_tokens are one setting, given twice"),
    ('run.yaml', 'model_args: torch_dtype=float16\n', "field 'model_args': must be a mapping of key: value settings, got 'torch_dtype=float16'"),
    ('run.yaml', b'template: "USER: <image>\\n{question} caf\xe9 ASSISTANT:"\nlimit: 2\n', 'run.yaml:1: not UTF-8 text (bad byte 0xe9'),
])
def test_config_that_cannot_be_read_one_way(setup, tmp_path, capsys, name, text, message):
    cfg = tmp_path/name
    cfg.write_bytes(text if isinstance(text, bytes) else text.encode())
    refused(capsys, setup(tmp_path/'out', '--config', cfg), tmp_path/'out', message)


@pytest.mark.parametrize('extra, message', [
    (['--max-new-tokens', '4', '--max-new-tokens', '8'], "field 'max-new-tokens': --max-new-tokens is given twice; give it once"),
    (['--max-new-tok', '8'], "--max-new-tokens is given twice"),                           # an abbreviation is the same option
    (['--dtype', 'float32', '--dtype=bfloat16'], '--dtype is given twice'),
    (['--model-args', 'max_new_tokens=8'], "field 'model_args': max_new_tokens is a run setting of its own (--max-new-tokens), not a model argument"),
    (['--model-args', 'low_cpu_mem_usage=true,low_cpu_mem_usage=false'], '--model-args gives low_cpu_mem_usage twice'),
    (['--model-args', 'max_memory=10GB'], "field 'model_args': max_memory must be a mapping of key: value settings, got '10GB'"),
    (['--model-args', 'quantization_config=nf4'], "quantization_config must be a mapping of key: value settings, got 'nf4'"),
])
def test_command_line_settings_given_twice_or_in_the_wrong_place(setup, tmp_path, capsys, extra, message):
    refused(capsys, setup(tmp_path/'out', *extra), tmp_path/'out', message)


# --- corrections ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('spec, message', [
    ('vcd:alpha=0.5,alpha=2', "'vcd:alpha=0.5,alpha=2': parameter alpha is given twice"),
    ('vcd:alpha=1e300', 'vcd: alpha=1e+300 overflows float32'),
    ('vcd:alpha=inf', 'vcd: alpha=inf is not a finite number'),
    ('vdd:alpha=nan', 'vdd: alpha=nan is not a finite number'),
    ('vcd:alpha=1e36', 'vcd: alpha=1e+36 overflows: (1 + α)·z is computed in float32'),
])
def test_correction_parameters(setup, tmp_path, capsys, spec, message):
    refused(capsys, setup(tmp_path/'out', '--correction', spec), tmp_path/'out', message)


def test_large_but_computable_alpha_scores(setup, tmp_path, capsys):
    "The refusal is not a blanket cap: α = 1e6 runs, and its records score."
    from pope_audit.benchmarks.scoring import read_records
    main([str(a) for a in setup(tmp_path/'out', '--correction', 'vcd:alpha=1e6')])
    recs = read_records(tmp_path/'out')
    assert len(recs) == 6 and all(r.corrections and all(v == v for c in r.corrections.values() for v in c.values() if isinstance(v, float)) for r in recs)
    capsys.readouterr()
    main(['score', str(tmp_path/'out'), '--boot', '0'])
    assert 'vcd:alpha=1000000' in capsys.readouterr().out


# --- the machine ------------------------------------------------------------------------------------------------------

def test_processes_beyond_usable_cores(setup, tmp_path, capsys):
    n = usable_cores()
    refused(capsys, setup(tmp_path/'out', '--processes', n + 1, '--device', 'cpu'), tmp_path/'out',
            f"field 'processes': {n + 1} processes asked for, but this machine can run {n} (CPU cores this process may use)")


@pytest.mark.skipif(not hasattr(os, 'sched_setaffinity'), reason='no CPU affinity on this platform')
def test_processes_limit_follows_cpu_affinity(setup, tmp_path):
    "Pinned to one core, the process may start one worker: --processes 2 is refused before torchrun starts any."
    r = subprocess.run(CLI + [str(a) for a in setup(tmp_path/'out', '--processes', '2', '--device', 'cpu')], capture_output=True, text=True,
                       preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))
    assert r.returncode == 2 and '2 processes asked for, but this machine can run 1 (CPU cores this process may use)' in r.stderr, r.stderr
    assert 'Traceback' not in r.stderr and not (tmp_path/'out').exists()


@pytest.mark.skipif(__import__('torch').cuda.is_available(), reason='a CUDA build with a device: cuda:0 exists')
@pytest.mark.parametrize('extra, message', [
    (['--device', 'cuda:0'], "field 'device': device 'cuda:0': this torch sees no cuda device"),
    (['--model-args', 'device_map=cuda:0'], "field 'model_args': device 'cuda:0': this torch sees no cuda device"),
    (['--model-args', 'device_map=0'], "device 'cuda:0': this torch sees no cuda device"),
    (['--device', 'tpu:0'], "unknown device 'tpu:0'"),
])
def test_devices_that_do_not_exist(setup, tmp_path, capsys, extra, message):
    refused(capsys, setup(tmp_path/'out', *extra), tmp_path/'out', message)


def test_attention_implementation_not_installed(setup, tmp_path, capsys):
    from transformers.utils import is_flash_attn_2_available
    if is_flash_attn_2_available(): pytest.skip('flash-attn is installed here')
    refused(capsys, setup(tmp_path/'out', '--attn-implementation', 'flash_attention_2'), tmp_path/'out',
            "field 'attn_implementation': attention implementation 'flash_attention_2' is not installed here")


@pytest.mark.parametrize('name, cut', [('tokenizer.json', 0.5), ('config.json', 0.5), ('tokenizer_config.json', 0.0)])
def test_damaged_model_folder(setup, tiny_dirs, tmp_path, capsys, name, cut):
    model = tmp_path/'model'
    shutil.copytree(tiny_dirs['llava15'], model)
    data = (model/name).read_bytes()
    (model/name).write_bytes(data[:int(len(data) * cut)] if cut else b'\xff\xfe{}')
    err = refused(capsys, setup(tmp_path/'out', model=model), tmp_path/'out', f"{name}: field 'model': ")
    assert ('not valid JSON' if cut else 'not UTF-8 text') in err and 'the model folder is damaged' in err


# --- model arguments against run settings ------------------------------------------------------------------------------

@pytest.mark.parametrize('extra, message', [
    (['--dtype', 'float32', '--model-args', 'torch_dtype=float16'], 'torch_dtype=float16 in the model arguments contradicts the run dtype float32'),
    (['--dtype', 'bfloat16', '--model-args', 'dtype=float16'], 'dtype=float16 in the model arguments contradicts the run dtype bfloat16'),
    (['--model-args', 'torch_dtype=float16,dtype=bfloat16'], 'torch_dtype=float16 and dtype=bfloat16 in the model arguments contradict each other'),
    (['--model-args', 'torch_dtype=auto'], "torch_dtype='auto' in the model arguments is not a dtype a run records"),
    (['--model-args', 'attn_implementation=eager'], 'attn_implementation is a run setting of its own'),
])
def test_model_args_that_contradict_the_run(setup, tmp_path, capsys, extra, message):
    refused(capsys, setup(tmp_path/'out', *extra), tmp_path/'out', message)


@pytest.mark.parametrize('arg', ['torch_dtype=bfloat16', 'dtype=torch.bfloat16'])
def test_model_args_dtype_is_the_dtype_in_effect(setup, tmp_path, arg):
    "A dtype among the model arguments is honoured: the model loads in it, and the manifest records it as the run's dtype."
    from pope_audit.models.adapters import load_adapter
    main([str(a) for a in setup(tmp_path/'out', '--model-args', arg)])
    man = json.loads((tmp_path/'out'/'manifest.json').read_text())
    assert man['config']['dtype'] == man['identity']['dtype'] == 'bfloat16' and man['config']['model_args'] == {}
    assert set(man['identity']['module_dtypes'].values()) == {'bfloat16'}
    loaded = load_adapter(man['config']['model'], dtype=man['config']['dtype'], device='cpu')
    assert str(loaded.model.dtype) == 'torch.' + man['identity']['dtype']


# --- report -------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def attention_run(bench, tmp_path_factory):
    "The trained tiny VLM on the eight-scene benchmark, attention recorded."
    from pope_audit.running.inference import run
    from pope_audit.models.tinyvlm import tiny_vlm_dir
    qs, imgs = bench
    return run(str(tiny_vlm_dir()), qs, imgs, tmp_path_factory.mktemp('att')/'run', batch_size=16, max_new_tokens=1, attention=True, progress=False)


def test_report_with_attention_and_null_logits(attention_run, tmp_path):
    run = tmp_path/'run'
    shutil.copytree(attention_run, run)
    lines = (run/'records.jsonl').read_text().splitlines()
    recs = [json.loads(l) for l in lines]
    for r in recs[::7]: r['logits'] = r['margin'] = None        # a record without logits has no margin either
    (run/'records.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in recs))
    n = len(recs[::7])
    main(['report', str(run)])          # no statsmodels traceback (it was `exog contains inf or nans`)
    md = (run/'report.md').read_text()
    assert f'{n} question(s) with attention recorded lack a quantity this section needs' in md
    assert 'Attention on the image: correct vs wrong answers' in md and (run/'figures'/'attention.png').exists()


def read_only(folder, cmd):
    "`cmd` run where `folder` cannot be written: chmod for a user, a read-only bind mount in a private namespace for root (who writes anywhere)."
    os.chmod(folder, 0o555)
    if os.geteuid() != 0: return cmd
    if not shutil.which('unshare') or subprocess.run(['unshare', '-rm', 'true'], capture_output=True).returncode: pytest.skip('root, and no private mount namespace to make a folder read-only')
    return ['unshare', '-rm', 'sh', '-c', 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"', 'sh', str(folder), *cmd]


def test_report_on_read_only_run_folder(attention_run, tmp_path):
    run = tmp_path/'run'
    shutil.copytree(attention_run, run)
    try:
        r = subprocess.run(read_only(run, CLI + ['report', str(run)]), capture_output=True, text=True)
        assert r.returncode == 2 and r.stderr.count('\n') == 1, r.stderr[-3000:]
        assert "field 'out': cannot write the report into this folder (not writable); give --out a folder you can write" in r.stderr
        assert not (run/'report.md').exists()
    finally: os.chmod(run, 0o755)


def test_report_with_an_out_it_cannot_create(attention_run, tmp_path, capsys):
    out = Path('/proc/pope-audit-report')          # /proc takes no new folders, whoever asks (root included)
    if not Path('/proc').is_dir(): pytest.skip('no /proc')
    code, err = cli(capsys, 'report', attention_run, '--out', out)
    assert code == 2 and f"{out}: field 'out': the output folder is on a file system that stores no files (such as /proc or /sys)" in err, err
    assert len(err.strip().splitlines()) == 1
