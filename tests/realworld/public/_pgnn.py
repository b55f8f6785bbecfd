"""P-GNN's data code (``utils.py``, ``dataset.py``) for the port ``pgnn_grid_link`` (moved out to keep it readable).

Source: https://github.com/JiaxuanYou/P-GNN
Commit: 74a7d3ed4af435d74dccc7bb8751d3f1789c5bce
Files: ``utils.py`` (link masks, negative sampling, edge splits, ``precompute_dist_data``, anchor sets),
``dataset.py`` (``load_graphs('grid')``, ``nx_to_tg_data``, ``get_tg_dataset``'s uncached ``link`` branch)
License: MIT (Copyright (c) 2019 Jiaxuan You; full text in LICENSES/JiaxuanYou-P-GNN.txt)

Deviations (listed in the port's docstring): ``Data`` is a plain attribute holder (no torch_geometric); the grid is
10 x 10; ``nx.selfloop_edges(graph)``; ``precompute_dist_data`` uses the upstream's commented-out
``nx.all_pairs_shortest_path_length`` instead of a multiprocessing pool; ``split_edges`` keeps the
``connected=False`` branch only.
"""

import networkx as nx
import numpy as np
import torch


# ---------------------------------------------------------------- utils.py
def get_edge_mask_link_negative(mask_link_positive, num_nodes, num_negtive_edges):
    mask_link_positive_set = []
    for i in range(mask_link_positive.shape[1]):
        mask_link_positive_set.append(tuple(mask_link_positive[:,i]))
    mask_link_positive_set = set(mask_link_positive_set)

    mask_link_negative = np.zeros((2,num_negtive_edges), dtype=mask_link_positive.dtype)
    for i in range(num_negtive_edges):
        while True:
            mask_temp = tuple(np.random.choice(num_nodes,size=(2,),replace=False))
            if mask_temp not in mask_link_positive_set:
                mask_link_negative[:,i] = mask_temp
                break

    return mask_link_negative


def resample_edge_mask_link_negative(data):
    data.mask_link_negative_train = get_edge_mask_link_negative(data.mask_link_positive_train, num_nodes=data.num_nodes,
                                                      num_negtive_edges=data.mask_link_positive_train.shape[1])
    data.mask_link_negative_val = get_edge_mask_link_negative(data.mask_link_positive, num_nodes=data.num_nodes,
                                                      num_negtive_edges=data.mask_link_positive_val.shape[1])
    data.mask_link_negative_test = get_edge_mask_link_negative(data.mask_link_positive, num_nodes=data.num_nodes,
                                                     num_negtive_edges=data.mask_link_positive_test.shape[1])


def deduplicate_edges(edges):
    edges_new = np.zeros((2,edges.shape[1]//2), dtype=int)
    # add none self edge
    j = 0
    skip_node = {} # node already put into result
    for i in range(edges.shape[1]):
        if edges[0,i]<edges[1,i]:
            edges_new[:,j] = edges[:,i]
            j += 1
        elif edges[0,i]==edges[1,i] and edges[0,i] not in skip_node:
            edges_new[:,j] = edges[:,i]
            skip_node.add(edges[0,i])
            j += 1

    return edges_new


def duplicate_edges(edges):
    return np.concatenate((edges, edges[::-1,:]), axis=-1)


def split_edges(edges, remove_ratio, connected=False):
    e = edges.shape[1]
    edges = edges[:, np.random.permutation(e)]
    # (port) only the connected=False branch, the one get_link_mask takes
    split1 = int((1-remove_ratio)*e)
    split2 = int((1-remove_ratio/2)*e)
    edges_train = edges[:,:split1]
    edges_val = edges[:,split1:split2]
    edges_test = edges[:,split2:]

    return edges_train, edges_val, edges_test


def get_link_mask(data, remove_ratio=0.2, resplit=True, infer_link_positive=True):
    if resplit:
        if infer_link_positive:
            data.mask_link_positive = deduplicate_edges(data.edge_index.numpy())
        data.mask_link_positive_train, data.mask_link_positive_val, data.mask_link_positive_test = \
            split_edges(data.mask_link_positive, remove_ratio)
    resample_edge_mask_link_negative(data)


def precompute_dist_data(edge_index, num_nodes, approximate=0):
        '''
        Here dist is 1/real_dist, higher actually means closer, 0 means disconnected
        :return:
        '''
        graph = nx.Graph()
        edge_list = edge_index.transpose(1,0).tolist()
        graph.add_edges_from(edge_list)

        n = num_nodes
        dists_array = np.zeros((n, n))
        dists_dict = nx.all_pairs_shortest_path_length(graph,cutoff=approximate if approximate>0 else None)
        dists_dict = {c[0]: c[1] for c in dists_dict}
        for i, node_i in enumerate(graph.nodes()):
            shortest_dist = dists_dict[node_i]
            for j, node_j in enumerate(graph.nodes()):
                dist = shortest_dist.get(node_j, -1)
                if dist!=-1:
                    dists_array[node_i, node_j] = 1 / (dist + 1)
        return dists_array


def get_random_anchorset(n,c=0.5):
    m = int(np.log2(n))
    copy = int(c*m)
    anchorset_id = []
    for i in range(m):
        anchor_size = int(n/np.exp2(i + 1))
        for j in range(copy):
            anchorset_id.append(np.random.choice(n,size=anchor_size,replace=False))
    return anchorset_id


def get_dist_max(anchorset_id, dist, device):
    dist_max = torch.zeros((dist.shape[0],len(anchorset_id))).to(device)
    dist_argmax = torch.zeros((dist.shape[0],len(anchorset_id))).long().to(device)
    for i in range(len(anchorset_id)):
        temp_id = torch.as_tensor(anchorset_id[i], dtype=torch.long)
        dist_temp = dist[:, temp_id]
        dist_max_temp, dist_argmax_temp = torch.max(dist_temp, dim=-1)
        dist_max[:,i] = dist_max_temp
        dist_argmax[:,i] = temp_id[dist_argmax_temp]
    return dist_max, dist_argmax


def preselect_anchor(data, layer_num=1, anchor_num=32, anchor_size_num=4, device='cpu'):

    data.anchor_size_num = anchor_size_num
    data.anchor_set = []
    anchor_num_per_size = anchor_num//anchor_size_num
    for i in range(anchor_size_num):
        anchor_size = 2**(i+1)-1
        anchors = np.random.choice(data.num_nodes, size=(layer_num,anchor_num_per_size,anchor_size), replace=True)
        data.anchor_set.append(anchors)
    data.anchor_set_indicator = np.zeros((layer_num, anchor_num, data.num_nodes), dtype=int)

    anchorset_id = get_random_anchorset(data.num_nodes,c=1)
    data.dists_max, data.dists_argmax = get_dist_max(anchorset_id, data.dists, device)


# ---------------------------------------------------------------- dataset.py
class Data:
    """(port) stands in for torch_geometric.data.Data: an attribute holder."""

    def __init__(self, x, edge_index):
        self.x, self.edge_index, self.num_nodes = x, edge_index, x.shape[0]


def load_graphs_grid():
    graphs = []
    features = []
    for _ in range(1):
        graph = nx.grid_2d_graph(10, 10)  # (port) 20 x 20 upstream
        graph = nx.convert_node_labels_to_integers(graph)

        feature = np.identity(graph.number_of_nodes())
        graphs.append(graph)
        features.append(feature)
    return graphs, features


def nx_to_tg_data(graphs, features, edge_labels=None):
    data_list = []
    for i in range(len(graphs)):
        feature = features[i]
        graph = graphs[i].copy()
        graph.remove_edges_from(nx.selfloop_edges(graph))  # (port) graph.selfloop_edges() in networkx < 2.4

        # relabel graphs
        keys = list(graph.nodes)
        vals = range(graph.number_of_nodes())
        mapping = dict(zip(keys, vals))
        nx.relabel_nodes(graph, mapping, copy=False)

        x = np.zeros(feature.shape)
        graph_nodes = list(graph.nodes)
        for m in range(feature.shape[0]):
            x[graph_nodes[m]] = feature[m]
        x = torch.from_numpy(x).float()

        # get edges
        edge_index = np.array(list(graph.edges))
        edge_index = np.concatenate((edge_index, edge_index[:,::-1]), axis=0)
        edge_index = torch.from_numpy(edge_index).long().permute(1,0)

        data = Data(x=x, edge_index=edge_index)
        data_list.append(data)
    return data_list


def get_tg_dataset_link(args):
    """get_tg_dataset's uncached branch for the ``link`` task."""
    data_list = []
    for i, data in enumerate(nx_to_tg_data(*load_graphs_grid())):
        get_link_mask(data, args['remove_link_ratio'], resplit=True, infer_link_positive=True)
        dists_removed = precompute_dist_data(data.mask_link_positive_train, data.num_nodes,
                                             approximate=args['approximate'])
        data.dists = torch.from_numpy(dists_removed).float()
        data.edge_index = torch.from_numpy(duplicate_edges(data.mask_link_positive_train)).long()
        data_list.append(data)
    return data_list
