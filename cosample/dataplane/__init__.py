"""What runs on production hosts: the command runner and the tc mirror program builder.

``run`` executes external programs (argument lists, total timeouts, errors naming the program);
``tcmirror`` builds the classic-BPF random classifier and ``tc`` argument lists for probabilistic
mirrors. The agents and the cost model's mechanisms use them; ``cosample.lab`` (test and
experiment rigs) builds on them but nothing here depends on the lab.
"""
