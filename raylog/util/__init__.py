"""Shared helpers of every layer: argument checks, type checks, clocks, backoffs, progress
lines, the garbage collector's pause, fault points, metrics, the Java interop's JSON and
errors, and the names by which raylog's actors and data are found. They import nothing of
raylog but its errors."""
