"""Data-parallel MNIST on tcoll: torchrun --nproc-per-node 2 examples/torch/train_ddp.py"""
import numpy as np, torch, torch.distributed as dist
import tcoll_torch  # registers the "tcoll" backend

dist.init_process_group("tcoll")
rank, size = dist.get_rank(), dist.get_world_size()
data = np.loadtxt("data/mnist/mnist_5k.csv.gz", delimiter=",", dtype=np.float32)
order = np.random.default_rng(0).permutation(len(data))  # the file is sorted by label
train, test = data[order[:4000]], data[order[4000:]]
shard = torch.from_numpy(train[rank::size])  # this rank's part of every epoch
x, y = shard[:, :784].view(-1, 1, 28, 28) / 255, shard[:, 784].long()
net = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                          torch.nn.Flatten(), torch.nn.Linear(8 * 12 * 12, 10))
model = tcoll_torch.DistributedDataParallel(net, planner="optimal")
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for epoch in range(3):
    for i in range(0, len(x), 32):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[i:i + 32]), y[i:i + 32]).backward()
        opt.step()
    tx = torch.from_numpy(test[:, :784]).view(-1, 1, 28, 28) / 255
    accuracy = (net(tx).argmax(1).numpy() == test[:, 784]).mean()
    if rank == 0: print(f"epoch {epoch}: test accuracy {accuracy:.3f}, buckets {model.plan()}")
dist.destroy_process_group()
