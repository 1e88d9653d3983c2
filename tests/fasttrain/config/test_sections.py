"""The config's sections: a dataclass per section, learners' sections live, the valid values."""

import dataclasses

from fasttrain.config import choices as options
from fasttrain.config import sections
from fasttrain.config.file import field_docs
from fasttrain.learners import LEARNERS


def test_the_sections_are_in_file_order_with_each_learner_between_game_and_model():
    assert list(sections.SECTIONS) == ["run", "game", *LEARNERS, "model", "log"]
    assert sections.SECTIONS["ppo"] is LEARNERS["ppo"].config
    assert set(sections.LEARNER_SECTIONS) == set(LEARNERS)


def test_every_field_of_every_section_has_a_default_and_a_docstring():
    for name, cls in sections.SECTIONS.items():
        defaults = cls()  # every field has a default: no file is needed to run
        docs = field_docs(cls)
        for field in dataclasses.fields(cls):
            assert docs.get(field.name), f"{name}.{field.name} has no docstring"
            assert hasattr(defaults, field.name)


def test_the_choices_of_a_key_come_from_the_one_list_of_each():
    assert sections.choices("run", "algo") == tuple(LEARNERS)
    assert sections.choices("run", "device") is options.DEVICES
    assert sections.choices("model", "core") is options.CORES
    assert sections.choices("ppo", "optimizer") is options.OPTIMIZERS
    assert sections.choices("dqn", "loss") == ("huber", "mse")
    assert sections.choices("ppo", "gamma") is None  # any float goes (ranges are checked later)
    # each default is one of its choices
    for name, cls in sections.SECTIONS.items():
        for field in dataclasses.fields(cls):
            valid = sections.choices(name, field.name)
            assert valid is None or field.default in valid, f"{name}.{field.name}"
