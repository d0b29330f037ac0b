"""The handler registry's declarations (broker/handlers/__init__.py), in process: what an Api refuses to
declare, the ACL an undeclared or inter-broker API gets, and that every handler module is registered."""

import pkgutil

import pytest

import broker.handlers
from broker.handlers import HANDLERS, Api
from broker.security.authorization import ANYONE, CLUSTER_ACTION, GROUP_READ, IN_HANDLER, SUPER_USERS


@pytest.mark.parametrize("declaration,problem", [
    (dict(name="JoinGroups", versions=(0, 1)), "not an API"),
    (dict(name="JoinGroup", versions=(3, 2)), "not \\(min, max\\)"),
    (dict(name="ReadShareGroupState", versions=(0, 0), inter_broker=True, acl=IN_HANDLER), "declare no acl"),
    (dict(name="JoinGroup", versions=(0, 9), acl="Read"), "not an ACL requirement"),
    (dict(name="JoinGroup", versions=(0, 9), acl=(("Read", 3, "group_id", 30),)), "not an ACL requirement"),
])
def test_a_wrong_declaration_is_refused_at_import(declaration, problem):
    with pytest.raises(ValueError, match=problem):
        Api(**declaration)


def test_acl_defaults():
    assert Api("JoinGroup", (0, 9)).acl == SUPER_USERS  # an API whose checks are missing serves super users only
    assert Api("ReadShareGroupState", (0, 0), inter_broker=True).acl == CLUSTER_ACTION
    assert Api("JoinGroup", (0, 9), acl=GROUP_READ).key == 11


def test_every_handler_module_is_registered():
    modules = {m.name for m in pkgutil.iter_modules(broker.handlers.__path__)}
    registered = {h.handle.__module__.rsplit(".", 1)[1] for h in HANDLERS.values()}
    assert modules - registered == {"group_partitions"}  # helpers: no API, no handle
    assert all(not hasattr(getattr(broker.handlers, m, None), "handle") for m in modules - registered)
    before_authentication = {h.name for h in HANDLERS.values() if h.before_authentication}
    assert before_authentication == {"ApiVersions", "SaslHandshake", "SaslAuthenticate"}
    assert {h.name for h in HANDLERS.values() if h.acl == ANYONE} == before_authentication
