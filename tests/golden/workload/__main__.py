print("golden stand-in workload")
