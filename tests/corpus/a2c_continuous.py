"""Synchronous A2C for continuous control with a diagonal Gaussian policy."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal


class ActorCritic(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.mu = nn.Linear(hidden, act_dim)
        self.log_std = nn.Parameter(torch.zeros(act_dim))
        self.v = nn.Linear(hidden, 1)

    def forward(self, obs):
        h = self.body(obs)
        dist = Normal(self.mu(h), self.log_std.exp())
        return dist, self.v(h).squeeze(-1)


def compute_returns(rewards, dones, last_value, gamma):
    returns = []
    R = last_value
    for r, d in zip(reversed(rewards), reversed(dones)):
        R = r + gamma * R * (1.0 - d)
        returns.insert(0, R)
    return torch.stack(returns)


def train(env, model, total_updates=1000, n_steps=5, gamma=0.99, ent_coef=0.01, vf_coef=0.5):
    opt = torch.optim.RMSprop(model.parameters(), lr=7e-4, alpha=0.99, eps=1e-5)
    obs = torch.as_tensor(env.reset(), dtype=torch.float32)
    episode_rewards = []
    ep_reward = 0.0
    running_entropy = 0.0
    value_trace = []
    for update in range(total_updates):
        log_probs, values, rewards, dones, entropies = [], [], [], [], []
        for _ in range(n_steps):
            dist, value = model(obs)
            action = dist.sample()
            next_obs, reward, done, _ = env.step(action.numpy())
            log_probs.append(dist.log_prob(action).sum(-1))
            values.append(value)
            entropies.append(dist.entropy().sum(-1))
            rewards.append(torch.tensor(reward, dtype=torch.float32))
            dones.append(torch.tensor(float(done)))
            ep_reward += float(reward)
            if done:
                episode_rewards.append(ep_reward)
                ep_reward = 0.0
                next_obs = env.reset()
            obs = torch.as_tensor(next_obs, dtype=torch.float32)

        with torch.no_grad():
            _, last_value = model(obs)
        returns = compute_returns(rewards, dones, last_value, gamma)
        values_t = torch.stack(values)
        advantages = returns - values_t.detach()
        actor_loss = -(torch.stack(log_probs) * advantages).mean()
        critic_loss = F.mse_loss(values_t, returns)
        entropy = torch.stack(entropies).mean()
        loss = actor_loss + vf_coef * critic_loss - ent_coef * entropy

        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()

        running_entropy += entropy
        value_trace.append(values_t.mean())
        if update % 100 == 0 and episode_rewards:
            recent = episode_rewards[-10:]
            print(
                f"update {update} mean return {sum(recent) / len(recent):.1f} "
                f"entropy {float(running_entropy) / (update + 1):.3f}"
            )
    return model, episode_rewards


@torch.no_grad()
def evaluate(env, model, episodes=10):
    returns = []
    for _ in range(episodes):
        obs = torch.as_tensor(env.reset(), dtype=torch.float32)
        done, total = False, 0.0
        while not done:
            dist, _ = model(obs)
            obs, r, done, _ = env.step(dist.mean.numpy())
            obs = torch.as_tensor(obs, dtype=torch.float32)
            total += r
        returns.append(total)
    return sum(returns) / len(returns)
