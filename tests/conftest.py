"Shared fixtures: the shared data folder and tiny model folders saved with `save_pretrained`."
import pytest
from pope_audit.core import shared_dir


@pytest.fixture(scope='session')
def shared():
    d = shared_dir()
    if d is None: pytest.skip('shared data not found: set POPE_AUDIT_SHARED to the folder holding data/pope and tokenizers/')
    return d


@pytest.fixture(scope='session')
def pope(shared):
    from pope_audit.data import read_pope_files
    return read_pope_files([shared/'data/pope/coco'])


@pytest.fixture(scope='session')
def tiny_dirs(tmp_path_factory):
    "Folders holding each tiny family, saved the way a hub checkpoint is."
    from pope_audit.tiny import save_tiny, TINY
    root = tmp_path_factory.mktemp('tiny')
    return {fam: save_tiny(fam, root/fam) for fam in TINY}
