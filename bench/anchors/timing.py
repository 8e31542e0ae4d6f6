"""Timing shared by the PyTorch anchors, the same as the benchmarks' (bench/bench_support.h,
graph_timings): calls captured into one CUDA graph, replayed back to back between CUDA events
after two untimed replays, each figure one replay's time over its calls; min, median and max
over the replays."""

import statistics

import torch


def graph_times(fn, calls, repeats=11):
    """Per-call ms of fn(0) .. fn(calls - 1), captured into one CUDA graph and replayed `repeats`
    times. fn runs a few times first outside the capture (libraries pick kernels and workspaces
    on first use)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(min(calls, 3)):
            fn(i)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(i)
    for _ in range(2):
        graph.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for start, stop in zip(starts, stops):
        start.record()
        graph.replay()
        stop.record()
    torch.cuda.synchronize()
    times = [start.elapsed_time(stop) / calls for start, stop in zip(starts, stops)]
    del graph
    return times


def spread(times):
    """(min, median, max)."""
    return min(times), statistics.median(times), max(times)


def back_to_back_times(fn, iterations, warmup):
    """Per-call CUDA-event times in ms of `iterations` calls enqueued back to back, one
    synchronisation at the end: how `freezeframe bench` times the engine's steps (a step's
    host work overlaps the device's previous step), for graph replays of whole steps."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    for start, stop in zip(starts, stops):
        start.record()
        fn()
        stop.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(stop) for start, stop in zip(starts, stops)]


def event_times(fn, iterations, warmup):
    """Per-call CUDA-event times in ms, each call synchronised: for whole steps that are not
    graphs (llama_step.py's eager rows), not for comparisons with graph-timed kernels."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iterations):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return times
