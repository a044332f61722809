"""Inference-time compute (notebook 14): a task a program can check (verifiable), accuracy with its interval
and a paired test between two methods (accuracy, paired), ways to choose among n samples (choose), a method
run through the engine (method_run), a calculator tool and an agent loop that reads its results (calculator,
agent), and the copy-on-write exercise (cow_exercise)."""
