from spottrain.policies import JobState, NodeOption, NodeView, get_policy, uniform_progress


def node(i, spot=True, itype="p3.2xlarge"):
    return NodeView(node_id=f"n{i}", instance_type=itype, gpu="V100", spot=spot, zone="us-east-1a",
                    price_usd_per_hour=1.0 if spot else 3.06, throughput=100.0)


def option(spot=True, itype="p3.2xlarge", price=1.0, thr=100.0):
    return NodeOption(instance_type=itype, gpu="V100", spot=spot, zone="us-east-1a",
                      price_usd_per_hour=price, throughput=thr, delay_s=120.0)


def state(**kw):
    planned = tuple(node(i) for i in range(4))
    base = dict(now_s=1000.0, event="revoked", subject="n3", nodes=planned[:3], planned=planned, pending=0,
                samples_done=0.0, samples_total=1e6, deadline_s=None, restart_overhead_s=30.0,
                options=(option(), option(spot=False, price=3.06)), on_demand_fallback=())
    base.update(kw)
    return JobState(**base)


def test_replace_same_buys_back_the_revoked_type():
    d = get_policy("replace-same")(state())
    assert len(d.request) == 1 and d.request[0].spot and d.request[0].instance_type == "p3.2xlarge"


def test_no_second_replacement_when_one_is_pending():
    assert get_policy("replace-same")(state(pending=1)).request == ()


def test_notice_checkpoints():
    for name in ("replace-same", "replace-cheapest", "no-replace", "uniform-progress", "deadline-margin",
                 "deadline-cheapest"):
        assert get_policy(name)(state(event="notice")).checkpoint_now
        assert get_policy(name)(state(event="notice", deadline_s=100_000.0, on_demand_fallback=_od())).checkpoint_now


def test_replace_cheapest_picks_least_cost_per_sample():
    opts = (option(price=1.0, thr=100.0), option(itype="g4dn.xlarge", price=0.2, thr=40.0))
    d = get_policy("replace-cheapest")(state(options=opts))
    assert d.request[0].instance_type == "g4dn.xlarge"


def test_uniform_progress_switches_only_when_slack_runs_out():
    od = tuple(option(spot=False, price=3.06) for _ in range(4))
    # Remaining 1e6 samples at 400 samples/s on-demand = 2500 s, + restart + delay.
    relaxed = state(deadline_s=1000.0 + 10_000.0, on_demand_fallback=od)
    assert not uniform_progress(relaxed).switch_to_on_demand
    tight = state(deadline_s=1000.0 + 2600.0, on_demand_fallback=od)
    d = uniform_progress(tight)
    assert d.switch_to_on_demand and len(d.request) == 4 and set(d.release) == {"n0", "n1", "n2"}


def test_uniform_progress_does_not_ask_twice_while_the_fallback_boots():
    od = tuple(option(spot=False, price=3.06) for _ in range(4))
    tight = dict(deadline_s=1000.0 + 2600.0, on_demand_fallback=od, event="tick")
    for name in ("uniform-progress", "deadline-margin"):
        # spot released, the on-demand fallback requested and not joined yet: a tick changes nothing
        d = get_policy(name)(state(nodes=(), pending=4, pending_on_demand=4, **tight))
        assert not d.switch_to_on_demand and not d.request, name
        # spot replacements pending (not the fallback) do not stop the switch
        assert get_policy(name)(state(nodes=(), pending=4, **tight)).switch_to_on_demand, name


def test_deadline_margin_switches_earlier_than_uniform_progress():
    od = tuple(option(spot=False, price=3.06) for _ in range(4))
    # Slack of 5 minutes, margin min(20 min, 10% of 3950 s): uniform progress waits, the margin policy switches.
    s = state(deadline_s=1000.0 + 2500.0 + 30.0 + 120.0 + 300.0, on_demand_fallback=od)
    assert not uniform_progress(s).switch_to_on_demand
    assert get_policy("deadline-margin")(s).switch_to_on_demand


def _od():
    return tuple(option(spot=False, price=3.06) for _ in range(4))


def test_deadline_return_goes_on_demand_within_its_buffer_while_spot_is_short():
    # need 2500 s on-demand + 30 s restart + 120 s start-up; deadline 4500 s -> slack 850 s,
    # margin 450 s (10% of the deadline) -> 400 s left, inside the buffer of 3 x 150 s.
    s = state(deadline_s=4500.0, on_demand_fallback=_od())
    assert not get_policy("deadline-margin")(s).switch_to_on_demand
    d = get_policy("deadline-return")(s)
    assert d.switch_to_on_demand and len(d.request) == 4 and set(d.release) == {"n0", "n1", "n2"}
    # with the whole spot cluster alive there is nothing to fall back from
    full = state(deadline_s=4500.0, on_demand_fallback=_od(), nodes=tuple(node(i) for i in range(4)), event="tick")
    assert not get_policy("deadline-return")(full).switch_to_on_demand


def test_deadline_return_replaces_like_replace_same_when_slack_is_ample():
    s = state(deadline_s=100_000.0, on_demand_fallback=_od())
    d = get_policy("deadline-return")(s)
    assert not d.switch_to_on_demand and len(d.request) == 1 and d.request[0].spot


def test_deadline_return_asks_for_spot_again_only_with_slack_to_spare():
    on_od = tuple(node(10 + i, spot=False) for i in range(4))
    roomy = state(event="tick", nodes=on_od, deadline_s=4700.0, on_demand_fallback=_od())  # slack 580 s >= 2 x 150
    d = get_policy("deadline-return")(roomy)
    assert len(d.request) == 4 and all(o.spot for o in d.request) and not d.release
    assert get_policy("deadline-return")(state(event="tick", nodes=on_od, deadline_s=4700.0, on_demand_fallback=_od(),
                                                pending=4)).request == ()
    short = state(event="tick", nodes=on_od, deadline_s=4350.0, on_demand_fallback=_od())  # slack 265 s < 300 s
    assert get_policy("deadline-return")(short).request == ()


def test_deadline_return_releases_on_demand_when_spot_is_back():
    both = tuple(node(10 + i, spot=False) for i in range(4)) + tuple(node(i) for i in range(4))
    d = get_policy("deadline-return")(state(event="joined", nodes=both, deadline_s=4700.0, on_demand_fallback=_od()))
    assert set(d.release) == {"n10", "n11", "n12", "n13"}
    # too little slack left for another fall-back: keep on-demand, let the spot nodes go
    d = get_policy("deadline-return")(state(event="joined", nodes=both, deadline_s=4200.0, on_demand_fallback=_od()))
    assert set(d.release) == {"n0", "n1", "n2", "n3"}


def test_deadline_return_leaves_on_demand_plans_alone():
    od_plan = tuple(node(i, spot=False) for i in range(4))
    s = state(event="tick", nodes=od_plan, planned=od_plan, deadline_s=3000.0, on_demand_fallback=_od())
    d = get_policy("deadline-return")(s)
    assert not d.switch_to_on_demand and not d.request and not d.release


def test_replace_cheapest_skips_unavailable_useless_and_overpriced_options():
    own_down = NodeOption(instance_type="p3.2xlarge", gpu="V100", spot=True, zone="us-east-1a",
                          price_usd_per_hour=1.0, throughput=100.0, delay_s=120.0, p_available=0.0)
    other = option(itype="g5.xlarge", price=0.6, thr=80.0)
    d = get_policy("replace-cheapest")(state(options=(own_down, other)))
    assert d.request == (other,)  # the revoked type's market has no room now: the other type
    slower = option(itype="g4dn.xlarge", price=0.05, thr=-20.0)  # a slow GPU pacing a synchronous ring
    assert get_policy("replace-cheapest")(state(options=(own_down, slower))).request == ()
    # 100 samples/s for $1/h is the planned rate; $1/h for 10 samples/s is 10x worse: not worth a restart
    pricey = option(itype="g5.xlarge", price=1.0, thr=10.0)
    assert get_policy("replace-cheapest")(state(options=(own_down, pricey))).request == ()


def test_policies_that_buy_other_types_say_so():
    for name in ("replace-cheapest", "deadline-cheapest"):
        assert getattr(get_policy(name), "buys_other_types", False)
    for name in ("replace-same", "no-replace", "uniform-progress", "deadline-margin", "deadline-return"):
        assert not getattr(get_policy(name), "buys_other_types", False)


def test_replace_cheapest_with_the_runtimes_single_option_state():
    # spottrain.runtime offers one option (its own instance type) with default p_available
    local = NodeOption(instance_type="local", gpu="cpu", spot=True, zone=None, price_usd_per_hour=0.1,
                       throughput=1.0, delay_s=2.0)
    views = tuple(NodeView(node_id=f"w{i}", instance_type="local", gpu="cpu", spot=True, zone=None,
                           price_usd_per_hour=0.1, throughput=1.0) for i in range(2))
    st = JobState(now_s=1.0, event="revoked", subject="w1", nodes=views[:1], planned=views, pending=0,
                  samples_done=0.0, samples_total=10.0, deadline_s=None, restart_overhead_s=1.0, options=(local,))
    assert get_policy("replace-cheapest")(st).request == (local,)


# ---------------------------------------------------------------- deadline-cheapest
# The fallback (4 x 100 samples/s on-demand) needs 2500 s for the remaining 1e6 samples, + 30 s
# restart + 120 s start-up: slack = deadline - 1000 s (now) - 2650 s - margin (min(1200 s, 10%)).
T4_DOWN = NodeOption(instance_type="p3.2xlarge", gpu="V100", spot=True, zone="us-east-1a",
                     price_usd_per_hour=1.0, throughput=100.0, delay_s=120.0, p_available=0.0)


def _t4(price=0.2, thr=40.0, p=1.0):
    return NodeOption(instance_type="g4dn.xlarge", gpu="T4", spot=True, zone="us-east-1a",
                      price_usd_per_hour=price, throughput=thr, delay_s=120.0, p_available=p)


def test_deadline_cheapest_buys_another_type_while_slack_remains():
    s = state(deadline_s=100_000.0, on_demand_fallback=_od(), options=(T4_DOWN, _t4(), option(spot=False, price=3.06)))
    d = get_policy("deadline-cheapest")(s)
    assert d.request == (_t4(),) and not d.switch_to_on_demand
    # deadline-margin only knows the plan's type, whose market is empty now: it buys it anyway
    assert get_policy("deadline-margin")(s).request[0].instance_type == "p3.2xlarge"
    # without a deadline it is replace-cheapest
    assert get_policy("deadline-cheapest")(state(options=(T4_DOWN, _t4()))).request == (_t4(),)


def test_deadline_cheapest_switches_exactly_when_deadline_margin_does():
    opts = (T4_DOWN, _t4())
    for deadline in (3900.0, 4000.0, 4100.0, 4500.0, 5000.0, 5500.0):
        for event in ("revoked", "tick"):
            s = state(deadline_s=deadline, on_demand_fallback=_od(), options=opts, event=event)
            ours, margin = get_policy("deadline-cheapest")(s), get_policy("deadline-margin")(s)
            assert ours.switch_to_on_demand == margin.switch_to_on_demand, (deadline, event)
            if ours.switch_to_on_demand:
                assert ours.request == _od() and set(ours.release) == {"n0", "n1", "n2"} and ours.checkpoint_now


def test_deadline_cheapest_releases_other_types_when_it_falls_back():
    mixed = (node(0), node(1), NodeView(node_id="t9", instance_type="g4dn.xlarge", gpu="T4", spot=True,
                                        zone="us-east-1a", price_usd_per_hour=0.2, throughput=40.0))
    d = get_policy("deadline-cheapest")(state(event="tick", nodes=mixed, deadline_s=3900.0, on_demand_fallback=_od()))
    assert d.switch_to_on_demand and set(d.release) == {"n0", "n1", "t9"}


def test_deadline_cheapest_stays_on_the_fallback_once_there():
    on_od = tuple(node(10 + i, spot=False) for i in range(4))
    for nodes, pending, pod in ((on_od, 0, 0), ((), 4, 4), (on_od[:3], 0, 0)):
        s = state(event="tick", nodes=nodes, pending=pending, pending_on_demand=pod, deadline_s=3900.0,
                  on_demand_fallback=_od(), options=(_t4(),))
        d = get_policy("deadline-cheapest")(s)
        assert not d.request and not d.switch_to_on_demand and not d.release
    # spot replacements pending (not the fallback) do not stop the switch
    s = state(event="tick", nodes=(), pending=4, deadline_s=3900.0, on_demand_fallback=_od(), options=(_t4(),))
    assert get_policy("deadline-cheapest")(s).switch_to_on_demand


def test_deadline_cheapest_skips_what_replace_cheapest_skips_and_what_the_slack_cannot_pay():
    base = dict(deadline_s=100_000.0, on_demand_fallback=_od())
    for bad in (_t4(p=0.0), _t4(thr=-20.0), _t4(price=1.0, thr=10.0)):
        assert get_policy("deadline-cheapest")(state(options=(T4_DOWN, bad), **base)).request == ()
    # slack = 0.9 x deadline - 3650 s (margin: 10% of the deadline); a join costs the option's 120 s
    fits = state(options=(_t4(),), deadline_s=(3650.0 + 450.0) / 0.9, on_demand_fallback=_od())  # slack 450 s
    assert get_policy("deadline-cheapest")(fits).request == (_t4(),)
    tight = state(options=(_t4(),), deadline_s=(3650.0 + 100.0) / 0.9, on_demand_fallback=_od())  # slack 100 s
    d = get_policy("deadline-cheapest")(tight)
    assert d.request == () and not d.switch_to_on_demand


def test_deadline_cheapest_refills_at_ticks_when_nothing_is_pending():
    s = state(event="tick", nodes=(node(0),), deadline_s=100_000.0, on_demand_fallback=_od(), options=(T4_DOWN, _t4()))
    assert get_policy("deadline-cheapest")(s).request == (_t4(),) * 3
    assert get_policy("deadline-cheapest")(state(event="tick", nodes=(node(0),), pending=1, deadline_s=100_000.0,
                                                 on_demand_fallback=_od(), options=(_t4(),))).request == ()
    assert get_policy("deadline-cheapest")(state(event="joined", nodes=(node(0),), deadline_s=100_000.0,
                                                 on_demand_fallback=_od(), options=(_t4(),))).request == ()


def _on_t4(n):
    return tuple(NodeView(node_id=f"t{i}", instance_type="g4dn.xlarge", gpu="T4", spot=True, zone="us-east-1a",
                          price_usd_per_hour=0.2, throughput=40.0) for i in range(n))


def test_deadline_cheapest_moves_back_to_the_plans_type_when_it_is_granted_again():
    back = option()  # p3.2xlarge spot, p_available 1.0: its market has room again
    s = state(event="tick", nodes=(node(0),) + _on_t4(3), deadline_s=100_000.0, on_demand_fallback=_od(),
              options=(back, _t4()))
    d = get_policy("deadline-cheapest")(s)
    assert d.request == (back,) * 3 and not d.release
    # not while its market is still empty, nor with a request outstanding
    assert get_policy("deadline-cheapest")(state(event="tick", nodes=(node(0),) + _on_t4(3), deadline_s=100_000.0,
                                                 on_demand_fallback=_od(), options=(T4_DOWN, _t4()))).request == ()
    assert get_policy("deadline-cheapest")(state(event="tick", nodes=(node(0),) + _on_t4(3), pending=3,
                                                 deadline_s=100_000.0, on_demand_fallback=_od(),
                                                 options=(back, _t4()))).request == ()
    # once the plan's nodes have joined, the other types go
    joined = state(event="joined", nodes=tuple(node(i) for i in range(4)) + _on_t4(3), deadline_s=100_000.0,
                   on_demand_fallback=_od())
    assert set(get_policy("deadline-cheapest")(joined).release) == {"t0", "t1", "t2"}
    half = state(event="joined", nodes=(node(0), node(1)) + _on_t4(3), deadline_s=100_000.0, on_demand_fallback=_od())
    assert get_policy("deadline-cheapest")(half).release == ()


def _anchored():
    """A plan of one on-demand anchor beside three spot nodes; its fallback is four on-demand nodes."""
    return (node(9, spot=False),) + tuple(node(i) for i in range(3))


def test_uniform_progress_falls_back_when_only_the_plans_on_demand_anchor_is_left():
    planned = _anchored()
    tight = dict(deadline_s=1000.0 + 2600.0, on_demand_fallback=_od(), planned=planned)
    for name in ("uniform-progress", "deadline-margin"):
        # every spot node revoked: the anchor alone trains at a quarter of the plan's rate
        d = get_policy(name)(state(nodes=planned[:1], subject="n2", **tight))
        assert d.switch_to_on_demand, name
        assert len(d.request) == 3 and not d.release, name  # the anchor is one of the fallback's four
        # the three requested and booting: nothing more
        d = get_policy(name)(state(nodes=planned[:1], pending=3, pending_on_demand=3, event="tick", **tight))
        assert not d.switch_to_on_demand and not d.request, name
        # on the fallback (anchor + three): stays
        on_od = planned[:1] + tuple(node(10 + i, spot=False) for i in range(3))
        assert not get_policy(name)(state(nodes=on_od, event="tick", **tight)).switch_to_on_demand, name


def test_uniform_progress_leaves_on_demand_plans_alone():
    od_plan = tuple(node(i, spot=False) for i in range(4))
    d = uniform_progress(state(event="tick", nodes=od_plan, planned=od_plan, deadline_s=1500.0, on_demand_fallback=_od()))
    assert not d.switch_to_on_demand and not d.request and not d.release


def test_deadline_return_keeps_the_plans_anchor_when_spot_is_back():
    planned = _anchored()
    on_od = planned[:1] + tuple(node(10 + i, spot=False) for i in range(3))
    kw = dict(planned=planned, on_demand_fallback=_od(), deadline_s=4700.0)
    # the full plan live, nothing else: the anchor is the plan's, not a fallback to release
    d = get_policy("deadline-return")(state(event="tick", nodes=planned, **kw))
    assert not d.release and not d.switch_to_on_demand
    # spot back beside the fallback: release the fallback's three, keep the anchor
    d = get_policy("deadline-return")(state(event="joined", nodes=on_od + planned[1:], **kw))
    assert set(d.release) == {"n10", "n11", "n12"}
