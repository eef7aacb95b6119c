"""Reports record what made them: the commit and a hash of the package's sources."""

from banditk.io.provenance import provenance, sources_sha256


def test_the_sources_hash_changes_with_a_file_and_only_then(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    first = sources_sha256(tmp_path)
    assert sources_sha256(tmp_path) == first
    (tmp_path / "sub" / "b.py").write_text("y = 3\n")
    assert sources_sha256(tmp_path) != first
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    (tmp_path / "notes.txt").write_text("not a source")
    assert sources_sha256(tmp_path) == first


def test_provenance_names_a_commit_and_this_tree_s_sources():
    p = provenance()
    assert set(p) == {"commit", "dirty", "sources_sha256"}
    assert p["sources_sha256"] == sources_sha256()
    assert len(p["commit"]) == 40  # the tests run in a git checkout
