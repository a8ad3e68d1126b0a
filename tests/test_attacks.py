"""Query attacks and document manipulations: deterministic under their seed, and each changes exactly what
it claims."""

import itertools
import random

import pandas as pd
import pytest

from leakexp.toolkit import attacks
from leakexp.toolkit.attacks import AttackError, WordLists, attack_queries, attack_query, query_rng

QUERIES = ["lyme disease", "black bear attacks", "deforestation in brazil", "hydroponics",
           "alzheimer drug treatment", "el nino weather", "a", "the of", "bee bee"]


def _rng(seed: int) -> random.Random:
    return random.Random(seed)


def _internal_edit(old: str, new: str) -> str | None:
    """Which single internal edit turns ``old`` into ``new`` (None if none does)."""
    if new[:1] != old[:1] or new[-1:] != old[-1:]:
        return None
    if len(new) == len(old) + 1 and any(new[:i] + new[i + 1:] == old for i in range(1, len(new) - 1)):
        return "insert"
    if len(new) == len(old) - 1 and any(old[:i] + old[i + 1:] == new for i in range(1, len(old) - 1)):
        return "delete"
    if len(new) == len(old):
        diff = [i for i in range(len(old)) if old[i] != new[i]]
        if len(diff) == 1:
            return "substitute"
        if len(diff) == 2 and diff[1] == diff[0] + 1 and old[diff[0]] == new[diff[1]] and old[diff[1]] == new[diff[0]]:
            return "swap"
    return None


@pytest.mark.parametrize("edit", ["insert", "delete", "substitute", "swap", "any"])
@pytest.mark.parametrize("n", [1, 2])
def test_char_attack_edits_exactly_one_internal_character_in_n_words(edit, n):
    for seed, text in itertools.product(range(40), QUERIES):
        a = attack_query(text, f"char-{edit}-{n}", _rng(seed))
        old, new = text.split(), a.text.split()
        eligible = [w for w in old if attacks.edit_applies(w, edit)]
        if len(eligible) < n:
            assert (a.applied, a.text, a.edits) == (False, text, "")
            continue
        assert a.applied and len(new) == len(old)
        changed = [(o, w) for o, w in zip(old, new) if o != w]
        assert len(changed) == n, (text, a.text)
        for o, w in changed:
            made = _internal_edit(o, w)
            assert made is not None and (made == edit or edit == "any"), (o, w, edit)
            assert o.lower() not in attacks.STOPWORDS
            assert w.islower() or not o.islower()


def test_char_any_draws_every_edit_type():
    made = {attack_query("tuberculosis outbreaks", "char-any-1", _rng(s)).edits.split("(")[1][:-1] for s in range(200)}
    assert made == {"insert", "delete", "substitute", "swap"}


def test_edit_eligibility_follows_internal_characters():
    assert attacks.edit_applies("abca", "swap") and attacks.edit_applies("ooze", "swap")  # 'b'/'c', 'o'/'z'
    assert not attacks.edit_applies("abba", "swap")  # the only internal pair is equal
    assert not attacks.edit_applies("see", "swap")  # a 3-letter word has one internal character
    assert attacks.edit_applies("see", "delete") and not attacks.edit_applies("tb", "delete")
    assert not attacks.edit_applies("the", "substitute")  # a stop word
    assert not attacks.edit_applies("covid19", "insert")  # not letters only


def test_word_delete_removes_one_content_word_and_keeps_one():
    for seed in range(30):
        a = attack_query("deforestation in brazil", "word-delete", _rng(seed))
        assert a.text in ("in brazil", "deforestation in")
        assert a.edits == "deleted " + ({"in brazil": "deforestation"}.get(a.text) or "brazil")
    assert not attack_query("hydroponics", "word-delete", _rng(0)).applied
    assert not attack_query("the hydroponics", "word-delete", _rng(0)).applied  # the only content word stays


def test_word_swap_exchanges_two_different_words():
    for seed in range(30):
        old = "alzheimer drug treatment".split()
        new = attack_query(" ".join(old), "word-swap", _rng(seed)).text.split()
        diff = [i for i in range(3) if old[i] != new[i]]
        assert len(diff) == 2 and sorted(new) == sorted(old)
        assert (new[diff[0]], new[diff[1]]) == (old[diff[1]], old[diff[0]])
    assert not attack_query("bee bee", "word-swap", _rng(0)).applied
    assert not attack_query("hydroponics", "word-swap", _rng(0)).applied


@pytest.mark.parametrize("attack,table", [("word-synonym", "synonyms"), ("word-misspell", "misspellings")])
def test_word_replacement_uses_a_listed_alternative_for_one_word(attack, table):
    lists = WordLists.load()
    alts = getattr(lists, table)
    for seed in range(30):
        old = "black bear attacks".split()
        a = attack_query(" ".join(old), attack, _rng(seed), lists)
        new = a.text.split()
        diff = [i for i in range(3) if old[i] != new[i]]
        assert len(diff) == 1 and new[diff[0]] in alts[old[diff[0]]]
    assert attack_query("Cuba", attack, _rng(0), lists).text[0].isupper()  # the case of the word is kept
    assert not attack_query("zzz qqq", attack, _rng(0), lists).applied


def test_attacks_are_deterministic_per_seed_and_independent_of_order():
    topics = pd.DataFrame({"qid": [str(i) for i in range(len(QUERIES))], "query": QUERIES})
    for name in attacks.query_attacks():
        a = attack_queries(topics, name, seed=7)
        pd.testing.assert_frame_equal(a, attack_queries(topics, name, seed=7))
        rev = attack_queries(topics.iloc[::-1].reset_index(drop=True), name, seed=7)
        pd.testing.assert_frame_equal(a, rev.iloc[::-1].reset_index(drop=True))
        assert (a.original == topics["query"]).all()
    char = [attack_queries(topics, "char-any-1", seed=s).attacked.tolist() for s in range(5)]
    assert len({tuple(c) for c in char}) > 1  # another seed, other attacks


def test_unknown_attack_and_bad_word_lists_name_the_input(tmp_path):
    with pytest.raises(AttackError, match="unknown query attack 'char-any-3'"):
        attack_query("x", "char-any-3", _rng(0))
    bad = tmp_path / "syn.tsv"
    bad.write_text("word\tsynonyms\ncar\tauto\nbus\tbus\n")
    with pytest.raises(AttackError, match=r"syn.tsv, line 3: 'bus' needs"):
        attacks.load_wordlist(bad)
    bad.write_text("word\tsynonyms\ncar auto\n")
    with pytest.raises(AttackError, match="line 2: expected word<TAB>"):
        attacks.load_wordlist(bad)
    with pytest.raises(AttackError, match="does not exist"):
        attacks.load_wordlist(tmp_path / "none.tsv")


def test_bundled_word_lists_cover_the_toy_titles_and_each_other():
    from leakexp.data.lexicon import TEST_THEMES

    lists = WordLists.load()
    words = {w for line in TEST_THEMES.splitlines() for w in line.split("|")[0].split()} - attacks.STOPWORDS
    assert words - set(lists.misspellings) == set()
    assert words - set(lists.synonyms) == {"el", "niño"}  # a name without a one-word synonym
    assert set(lists.misspellings) - set(lists.synonyms) == {"el", "nino", "niño"} and len(lists.synonyms) > 200
    for line in TEST_THEMES.splitlines():  # every toy title can be attacked by both word lists
        title = line.split("|")[0]
        assert attack_query(title, "word-synonym", _rng(0), lists).applied, title
        assert attack_query(title, "word-misspell", _rng(0), lists).applied, title


def test_stuffing_inserts_the_query_exactly_repeats_times():
    text = "the ferry left port at dawn"
    out = attacks.stuff_document(text, "ferry sinkings", 3, _rng(1))
    words = out.split()
    assert len(words) == len(text.split()) + 3 * 2 and words.count("sinkings") == 3 and words.count("ferry") == 4
    it = iter(words)
    assert all(w in it for w in text.split())  # the document's words keep their order
    assert out == attacks.stuff_document(text, "ferry sinkings", 3, _rng(1))


def test_noise_edits_words_in_place_and_keeps_length_and_whitespace():
    text = "Passengers drowned when the ferry\ncapsized  in a storm, officials said."
    out, n = attacks.noise_document(text, 1.0, _rng(3))
    assert len(out) == len(text) and [c.isspace() for c in out] == [c.isspace() for c in text]
    old, new = text.split(), out.split()
    edited = [(o, w) for o, w in zip(old, new) if o != w]
    assert len(edited) == n == sum(attacks.edit_applies(w, "substitute") for w in old)  # rate 1: every eligible word
    assert all(_internal_edit(o, w) in ("substitute", "swap") for o, w in edited)
    assert "storm," in new and "said." in new  # words with punctuation are not edited
    assert attacks.noise_document(text, 1.0, _rng(3)) == (out, n)
    assert attacks.noise_document(text, 1e-9, _rng(3)) == (text, 0)


def test_stuffing_targets_come_from_the_lower_ranks():
    pool = pd.DataFrame({"qid": ["1"] * 5 + ["2"] * 2 + ["3"], "query": ["q"] * 8,
                         "docno": [f"d{i}" for i in range(8)], "rank": [0, 1, 2, 3, 4, 0, 1, 0]})
    t = attacks.stuffing_targets(pool, from_rank=3, seed=0)
    assert t.qid.tolist() == ["1", "2"]  # topic 3 has one document: no ranking to change
    assert t.set_index("qid").first_stage_rank["1"] in (3, 4)
    assert t.set_index("qid").docno["2"] == "d6"  # shorter than from_rank: its last document
    assert query_rng(0, "stuff", "1").random() == query_rng(0, "stuff", "1").random()


# -- Wu et al.'s word-level attack (Sec. 5.3.2): Add, Remove, Substitute with a random word, and their mix --------
def test_word_add_inserts_one_new_lower_case_word():
    for seed, text in itertools.product(range(30), ["lyme disease", "Black bear attacks", "hydroponics"]):
        a = attack_query(text, "word-add", _rng(seed))
        old, new = text.split(), a.text.split()
        assert a.applied and len(new) == len(old) + 1
        added = [w for w in new if w not in old]
        assert len(added) == 1 and added[0].islower() and added[0] in attacks.VOCABULARY
        i = new.index(added[0])
        assert new[:i] + new[i + 1:] == old and a.edits == f"added {added[0]}"
    positions = {attack_query("black bear attacks", "word-add", _rng(s)).text.split().index(
        attack_query("black bear attacks", "word-add", _rng(s)).edits[6:]) for s in range(60)}
    assert positions == {0, 1, 2, 3}  # anywhere, the ends included


def test_word_substitute_replaces_one_content_word_by_a_random_word():
    for seed in range(30):
        a = attack_query("deforestation in brazil", "word-substitute", _rng(seed))
        old, new = "deforestation in brazil".split(), a.text.split()
        changed = [(o, w) for o, w in zip(old, new) if o != w]
        assert a.applied and len(new) == 3 and len(changed) == 1
        o, w = changed[0]
        assert o in ("deforestation", "brazil") and w in attacks.VOCABULARY and w not in old
    assert len({attack_query("deforestation in brazil", "word-substitute", _rng(s)).text for s in range(30)}) > 10
    assert not attack_query("the of", "word-substitute", _rng(0)).applied  # stop words only


def test_word_any_draws_add_remove_and_substitute():
    made = set()
    for seed in range(200):
        a = attack_query("alzheimer drug treatment", "word-any", _rng(seed))
        assert a.applied
        made.add("add" if a.edits.startswith("added") else "remove" if a.edits.startswith("deleted")
                 else "substitute" if a.edits.endswith("(random word)") else a.edits)
    assert made == {"add", "remove", "substitute"}
    # a one-word query cannot lose its word: Add or Substitute
    assert all(not attack_query("hydroponics", "word-any", _rng(s)).edits.startswith("deleted") for s in range(50))
    a = attack_queries(pd.DataFrame({"qid": ["1", "2"], "query": ["lyme disease", "el nino weather"]}), "word-any", 5)
    assert a.equals(attack_queries(pd.DataFrame({"qid": ["1", "2"], "query": ["lyme disease", "el nino weather"]}),
                                   "word-any", 5))  # seeded


def test_which_attacks_wu_et_al_define():
    assert {a for a in attacks.query_attacks() if attacks.defined_by_wu(a)} == {
        *(f"char-{e}-{n}" for e in ("insert", "delete", "substitute", "swap", "any") for n in (1, 2)),
        "word-add", "word-delete", "word-substitute", "word-any"}
    assert not any(attacks.defined_by_wu(a) for a in ("word-swap", "word-synonym", "word-misspell"))
    assert not set(attacks.VOCABULARY) & attacks.STOPWORDS and all(w.isalpha() and w.islower() for w in attacks.VOCABULARY)
