"""The shared name registry: taken names raise KeyError, unknown names list the known ones."""

import pytest

from sphere_tf import registry
from sphere_tf.ops import angular
from sphere_tf.ops import magnitude
from sphere_tf.ops import orthogonal


def test_register_then_lookup_and_refuse_a_taken_name():
    table = {}
    fn = registry.register(table, "a", len, "Thing")
    assert fn is len and registry.lookup(table, "a", "thing") is len
    with pytest.raises(KeyError, match="Thing 'a' is already registered"):
        registry.register(table, "a", abs, "Thing")
    assert table == {"a": len}  # the first entry stays


@pytest.mark.parametrize("name", ["b", None, ["a"]])
def test_unknown_or_unhashable_names_list_the_registered_ones(name):
    with pytest.raises(ValueError, match=r"Unknown thing .*; expected one of \['a', 'c'\]"):
        registry.lookup({"c": 1, "a": 2}, name, "thing")


@pytest.mark.parametrize(
    "get,table",
    [(angular.get_angular_fn, angular.ANGULAR_FNS), (magnitude.get_magnitude, magnitude.MAGNITUDE_FNS),
     (orthogonal.get_orthogonalization, orthogonal.ORTHOGONALIZATION_FNS)],
)
def test_every_package_registry_resolves_all_its_names_and_rejects_typos(get, table):
    for name, entry in table.items():
        assert get(name) is entry
    with pytest.raises(ValueError, match="expected one of"):
        get("no_such_name")
